# Rule 4 (backward): a NaN in the reference's gradient (sqrt under a where) must not switch the gradient check off; dx = 42 everywhere.
# Expected verdict: incorrect (the gradient of x differs where the reference is finite).
# The reference's gradient of x holds NaN (x < 0): gradient.compare scales by max|ref| = NaN, so the error is NaN
# and `NaN > worst` is False: the whole input's gradient is never checked. kernel_bwd returns 42 for every dx
# (also where x > 0, where the reference's gradient is finite) and a correct dw.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _fwd(x_ref, w_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.where(x > 0, jnp.sqrt(jnp.maximum(x, 0.0)), 0.0) * w_ref[...]


def kernel(x, w):
    r, d = x.shape
    return pl.pallas_call(_fwd, grid=(r // 8,),
                          in_specs=[pl.BlockSpec((8, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((8, d), lambda i: (i, 0)),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, w.reshape(1, d))


def _dw(x_ref, c_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)
    x = x_ref[...]
    o_ref[...] += jnp.sum(jnp.where(x > 0, jnp.sqrt(jnp.maximum(x, 0.0)), 0.0) * c_ref[...], axis=0, keepdims=True)


def kernel_bwd(cotangent, x, w):
    r, d = x.shape
    dw = pl.pallas_call(_dw, grid=(r // 8,),
                        in_specs=[pl.BlockSpec((8, d), lambda i: (i, 0)), pl.BlockSpec((8, d), lambda i: (i, 0))],
                        out_specs=pl.BlockSpec((1, d), lambda i: (0, 0)),
                        out_shape=jax.ShapeDtypeStruct((1, d), jnp.float32))(x, cotangent).reshape(d)
    return jnp.full_like(x, 42.0), dw
