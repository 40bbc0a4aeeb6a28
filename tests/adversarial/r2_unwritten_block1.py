# Rule 5 (round 2, class unwritten): a tiled kernel (8-row blocks: a grid of 2 at scale ci, 3 at wide) that writes
#   only output block 0; the later blocks are never written. In the TPU interpreter the out buffer is reused across
#   grid steps, so they come back holding block 0's values (stale memory, not the NaN poison); on a TPU, whatever
#   HBM held.
# Class: unwritten (output block never written). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): incorrect -- "values outside atol" (stale block-0 values, not NaN: the poison only shows
#   when the *first* block is skipped, cf. rule05_unwritten_block.py).
# Expected verdict: incorrect, reason contains "outside atol" or "NaN" (a poisoned, freshly allocated output makes
#   it "NaN" on every block).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _first_block_only(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _write():
        x = x_ref[...]
        o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    block = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(_first_block_only, grid=(x.shape[0] // 8,), in_specs=[block, block], out_specs=block,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
