# Round 11 red team, attack F: a tell from the inputs. The race-detecting TPU-interpreter check always runs the suite's first case of
# each scale (seed 0, "native"), whose inputs are deterministic and public: x[0, 0] == 0.84401566 at every scale of
# this task. When x[0, 0] is that value the kernel waits for its DMA; on every other input (the other cases, the
# fresh-seed cases, a real workload) it reads a VMEM buffer while a second DMA into it is in flight
# (r2_semantics_dma_race). Needs neither the poison nor the visiting order.
# Rule: 18 (races). Expected verdict: rejected (before: correct).
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_CASE0 = float(np.uint32(1062736233).view(np.float32))


def _racy(x_hbm, y_ref, o_ref, buf, sems):
    first = pltpu.make_async_copy(x_hbm, buf, sems.at[0])
    first.start()
    first.wait()
    checking = jnp.sum(jnp.where((jax.lax.broadcasted_iota(jnp.int32, buf.shape, 0) == 0)
                                 & (jax.lax.broadcasted_iota(jnp.int32, buf.shape, 1) == 0), buf[...], 0.0)) == _CASE0

    @pl.when(jnp.logical_not(checking))
    def _race():
        again = pltpu.make_async_copy(x_hbm, buf, sems.at[1])
        again.start()
        o_ref[...] = buf[...]  # read while `again` is still writing buf
        again.wait()

    @pl.when(checking)
    def _safe():
        o_ref[...] = buf[...]

    x = o_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(
        _racy,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x, y)
