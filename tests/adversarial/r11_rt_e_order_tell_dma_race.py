# Round 11 red team, attack E: a tell that needs no poison at all. The judge guarantees that its one race-detecting run (the
# TPU-interpreter check) starts every "parallel" axis of size >= 2 away from index 0, while the cases run in order.
# A zero-initialised flag (an output aliased to a jnp.zeros input, resident across the grid) records at the first
# visited step whether that step had i != 0: then "checking" and the kernel waits for its DMA; otherwise (the cases'
# HLO interpreter, core 0 of a chip) it reads the VMEM buffer while a second DMA into it is in flight
# (r2_semantics_dma_race). Would survive a fix that fills unwritten memory with NaN in both interpreters.
# Rule: 18 (races). Expected verdict: rejected (before: correct).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_rows": [8]}


def _body(x_hbm, y_ref, z_ref, o_ref, flag_ref, buf, sems, *, br: int):
    i = pl.program_id(0)
    f = jnp.max(flag_ref[...])
    checking = jnp.where(f == 0.0, i != 0, f == 2.0)
    flag_ref[...] = jnp.full(flag_ref.shape, jnp.where(checking, 2.0, 1.0), jnp.float32)
    first = pltpu.make_async_copy(x_hbm.at[pl.ds(i * br, br)], buf, sems.at[0])
    first.start()
    first.wait()

    @pl.when(jnp.logical_not(checking))
    def _race():
        again = pltpu.make_async_copy(x_hbm.at[pl.ds(i * br, br)], buf, sems.at[1])
        again.start()
        o_ref[...] = buf[...]  # read while `again` is still writing buf
        again.wait()

    @pl.when(checking)
    def _safe():
        o_ref[...] = buf[...]

    x = o_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y, *, block_rows: int = 8):
    import functools
    rows, cols = x.shape
    br = block_rows if rows % block_rows == 0 else rows
    out, _ = pl.pallas_call(
        functools.partial(_body, br=br),
        grid=(rows // br,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY),
                  pl.BlockSpec((br, cols), lambda i: (i, 0)),
                  pl.BlockSpec((8, 128), lambda i: (0, 0))],
        out_specs=[pl.BlockSpec((br, cols), lambda i: (i, 0)),
                   pl.BlockSpec((8, 128), lambda i: (0, 0))],
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((8, 128), jnp.float32)],
        input_output_aliases={2: 1},
        scratch_shapes=[pltpu.VMEM((br, cols), x.dtype), pltpu.SemaphoreType.DMA((2,))],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, y, jnp.zeros((8, 128), jnp.float32))
    return out
