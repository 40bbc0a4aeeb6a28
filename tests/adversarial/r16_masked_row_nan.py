# Rule: 3 (inputs with the values real data has). Round 16: a masked softmax that is honest except on a row whose
# boolean mask is all False (a padded sequence, a query that sees no key): it fills masked scores with -inf, so such
# a row is 0/0 = NaN where the reference (a finite -1e9 fill) gives the uniform 1/n. The suite's boolean inputs
# were drawn as coin flips: no case masked a whole row (found by stop 38's attack on attention masks).
# Expected verdict: incorrect (before: correct).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _masked_softmax_body(x_ref, m_ref, o_ref):
    s = jnp.where(m_ref[...] != 0, x_ref[...].astype(jnp.float32), -jnp.inf)
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
