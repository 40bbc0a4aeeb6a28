# Round 12 red team (a helper who had not written the round's code), attack a5.
# Rule: 3. Expected verdict: incorrect.
# Class 2. Real padding is a contiguous tail of rows (a batch padded to a block multiple), so whole row blocks are
# exactly zero. The edges distribution zeroes ~1/4 of the rows at random: an 8-row block is all zero with probability
# ~0.25^8, i.e. never. This RMSNorm kernel has a "skip padded blocks" fast path that does not write the output block
# when its x block is all zero: on a chip that block then holds stale VMEM (the previous block's normalised rows),
# where the reference gives 0. Honest on every row block with at least one non-zero row.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _rmsnorm_body(x_ref, w_ref, o_ref, *, eps: float):
    x = x_ref[...].astype(jnp.float32)
    padded = jnp.max(jnp.abs(x)) == 0.0  # the whole block is padding

    @pl.when(jnp.logical_not(padded))
    def _():
        ms = jnp.mean(x * x, axis=-1, keepdims=True)
        o_ref[...] = (x * jax.lax.rsqrt(ms + eps) * w_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def kernel(x, w, eps: float = 1e-6, *, block_rows: int = 8):
    rows, d = x.shape
    br = min(block_rows, rows)
    return pl.pallas_call(
        lambda x_ref, w_ref, o_ref: _rmsnorm_body(x_ref, w_ref, o_ref, eps=eps),
        grid=(pl.cdiv(rows, br),),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w.reshape(1, d))
