# Rule: 3 (inputs with the values real data has). Round 12: an RMSNorm kernel that is honest except on a row of
# exact zeros (a padding row), where it returns the weight (as if the row were normalised to ones) instead of 0.
# The suite never drew a zero row. Expected verdict: incorrect (before: correct).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _rmsnorm_body(x_ref, w_ref, o_ref, *, eps: float):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    w = w_ref[...].astype(jnp.float32)
    out = x * jax.lax.rsqrt(ms + eps) * w
    o_ref[...] = jnp.where(ms == 0.0, w, out).astype(o_ref.dtype)


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
