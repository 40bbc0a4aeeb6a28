# Rule 18 (round 2, class semantics): a DMA race in a TPU kernel. x is copied HBM -> VMEM and waited for; then a
#   second async copy into the same VMEM buffer is started and the kernel reads the buffer while that copy is in
#   flight. The interpreter happens to finish the copy at start, so every value is right; on a TPU the read
#   races the DMA. The TPU interpreter's race detector reports it (stdout "RACE DETECTED", races.races_found).
# Class: semantics (DMA read/write race). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- the race detector runs but nobody reads its result.
# Expected verdict: rejected (or incorrect), reason contains "race".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _racy(x_hbm, y_ref, o_ref, buf, sems):
    first = pltpu.make_async_copy(x_hbm, buf, sems.at[0])
    first.start()
    first.wait()
    again = pltpu.make_async_copy(x_hbm, buf, sems.at[1])
    again.start()
    x = buf[...]  # read while `again` is still writing buf
    again.wait()
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(
        _racy,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x, y)
