# Control: an honest row-tiled Pallas RMSNorm. Rule: all. Expected verdict: correct (target tpu).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _rmsnorm_body(x_ref, w_ref, o_ref, *, eps: float):
    x = x_ref[...].astype(jnp.float32)
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
