# Rule 18 (round 2, class semantics): two async copies into one VMEM buffer, both in flight: first y (wrong data),
#   then x (right data), waited for only afterwards. The interpreter applies DMAs in issue order, so the buffer
#   ends up holding x and every value is right; on a TPU the two DMAs may land in either order. NOTE: JAX 0.10.2's
#   race detector does NOT flag this write/write race (races.races_found stays False; checked with
#   InterpretParams(detect_races=True)) -- reading the detector's result is not enough for this one.
# Class: semantics (DMA write/write race). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "race" -- needs a check beyond the interpreter's detector (e.g. two
#   outstanding DMAs whose destinations overlap); with the detector alone it stays correct (a known gap).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _double_write(x_hbm, y_hbm, o_ref, buf, y_vmem, sems):
    load_y = pltpu.make_async_copy(y_hbm, y_vmem, sems.at[0])
    wrong = pltpu.make_async_copy(y_hbm, buf, sems.at[1])
    right = pltpu.make_async_copy(x_hbm, buf, sems.at[2])
    load_y.start()
    wrong.start()
    right.start()  # same destination, `wrong` not yet waited for
    load_y.wait()
    wrong.wait()
    right.wait()
    x = buf[...]
    o_ref[...] = jnp.tanh(x) * y_vmem[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(
        _double_write,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(y.shape, y.dtype), pltpu.SemaphoreType.DMA((3,))],
    )(x, y)
