# Round 12, second red team (a helper who had not written the fixes), attack b4.
# Rule: 3. Expected verdict: incorrect.
# Attack on fix 3 (task.zero_rows): padding comes at the START of sequences too (left-padded batches, as batched
# decoder generation pads). zero_rows zeroes scattered rows (~1/4) and the LAST half of rows (tails only), so an
# 8-row block in the first half of the rows is all zero with probability ~0.25^8. This RMSNorm kernel skips (does not
# write) an all-zero row block in the first half of the rows: on a chip that output block keeps stale VMEM where the
# reference gives 0. Honest everywhere else (including all-zero tail blocks, which the suite now has).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _rmsnorm_body(x_ref, w_ref, o_ref, *, eps: float, head_blocks: int):
    x = x_ref[...].astype(jnp.float32)
    skip = (jnp.max(jnp.abs(x)) == 0.0) & (pl.program_id(0) < head_blocks)   # a block of leading padding

    @pl.when(jnp.logical_not(skip))
    def _():
        ms = jnp.mean(x * x, axis=-1, keepdims=True)
        o_ref[...] = (x * jax.lax.rsqrt(ms + eps) * w_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def kernel(x, w, eps: float = 1e-6, *, block_rows: int = 8):
    rows, d = x.shape
    br = min(block_rows, rows)
    n = pl.cdiv(rows, br)
    return pl.pallas_call(
        lambda x_ref, w_ref, o_ref: _rmsnorm_body(x_ref, w_ref, o_ref, eps=eps, head_blocks=n // 2),
        grid=(n,),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w.reshape(1, d))
