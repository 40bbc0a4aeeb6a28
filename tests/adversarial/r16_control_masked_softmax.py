# Control: 16 (a mask that hides a whole row). The honest masked softmax beside r16_masked_row_nan: masked scores
# filled with the reference's own finite -1e9, so a row whose boolean mask is all False is the uniform 1/n there too.
# Expected verdict: correct (the edges case's whole masked rows refuse nothing honest).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _masked_softmax_body(x_ref, m_ref, o_ref):
    s = jnp.where(m_ref[...] != 0, x_ref[...].astype(jnp.float32), -1e9)
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def kernel(x, mask, *, block_rows: int = 8):
    rows, d = x.shape
    br = min(block_rows, rows)
    return pl.pallas_call(
        _masked_softmax_body,
        grid=(pl.cdiv(rows, br),),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((br, d), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, mask.astype(jnp.int32))
