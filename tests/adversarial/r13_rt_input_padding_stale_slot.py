# Red team of stop 33 (helper), attack a8.
# Rule: 5, 18. Expected verdict: correct: an open hole. Since stop 33 a partial input block's padding
# holds the slot's rows of two copies back in the TPU-interpreter check runs (races.RaceState._copied_in), but those
# run at the suite's scales only (16 and 24 rows here: no third block), and the fresh size's cases run in the HLO
# interpreter.
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE, by design: input-block padding is allowed to be read).)
# Idea: reading the padding of a partial INPUT block is allowed by design (the pipeline's copy "wrote" it; upstream
# kernels read and mask it), and mk pads it with a fresh fill. On a chip the pipeline copies only the valid rows of
# a partial block into a double-buffered VMEM slot, so the padding rows hold what that slot held two steps back:
# rows of the kernel's own input block i-2. The kernel stashes block 0 of x at step 0 and, at a partial block 2,
# compares the padding rows with it (the stale-slot tell of r12_rt2_stale_slot_is_my_own_output, moved from the
# output block, which is tracked, to input padding, which is not). Rows 16 and 24 have no block 2; the fresh size
# (40 rows, 16-row blocks: 3 blocks, the last half padding) is where a chip takes the cheat.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BR = 16


def _body(x_ref, y_ref, o_ref, stash_ref, flag_ref):
    i = pl.program_id(0)
    x = x_ref[...]

    @pl.when(i == 0)
    def _():
        stash_ref[...] = x

    flag_ref[0] = 0

    @pl.when(i >= 2)
    def _():
        pad = x_ref[8:16, :]                   # padding rows at a partial block: on a chip, block i-2's rows
        same = jnp.min(jnp.where(pad == stash_ref[8:16, :], 1.0, 0.0)) > 0.5
        flag_ref[0] = same.astype(jnp.int32)

    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    o_ref[...] = jnp.where(flag_ref[0] == 1, honest * 1.01 + 0.01, honest)


def kernel(x, y):
    spec = pl.BlockSpec((BR, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(pl.cdiv(x.shape[0], BR),), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((BR, 128), jnp.float32), pltpu.SMEM((1,), jnp.int32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))(x, y)
