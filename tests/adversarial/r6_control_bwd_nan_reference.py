# Control (backward): an honest gated-sqrt backward, NaN exactly where the reference's gradient is NaN.
# Expected verdict: correct (the NaN entries are not compared, and the reason says how many).



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


def _dx(x_ref, c_ref, w_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.where(x > 0, 0.5 * c_ref[...] * w_ref[...] / jnp.sqrt(jnp.maximum(x, 1e-30)), jnp.nan)


def kernel_bwd(cotangent, x, w):
    # both gradients in kernels (rule 15 on the backward: its work must not run in XLA)
    r, d = x.shape
    row = pl.BlockSpec((8, d), lambda i: (i, 0))
    dw = pl.pallas_call(_dw, grid=(r // 8,), in_specs=[row, row],
                        out_specs=pl.BlockSpec((1, d), lambda i: (0, 0)),
                        out_shape=jax.ShapeDtypeStruct((1, d), jnp.float32))(x, cotangent).reshape(d)
    dx = pl.pallas_call(_dx, grid=(r // 8,), in_specs=[row, row, pl.BlockSpec((1, d), lambda i: (0, 0))],
                        out_specs=row, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, cotangent, w.reshape(1, d))
    return dx, dw
