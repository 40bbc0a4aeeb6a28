# Control (rule 15, kernels feeding kernels): an honest two-kernel pipeline: kernel 1 computes the row means, kernel 2
# scales each row by its mean. Only kernel 2's output is the result, so replacing kernel 1 while kernel 2 is replaced
# too cannot change it. Expected verdict: correct (target tpu); before, "kernel 1 of 2 does no work".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _mean_kernel(x_ref, m_ref):
    m_ref[...] = jnp.mean(x_ref[...].astype(jnp.float32), axis=-1, keepdims=True)


def _scale_kernel(x_ref, m_ref, o_ref):
    o_ref[...] = (m_ref[...] * x_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def kernel(x, *, block_rows: int = 8):
    rows, n = x.shape
    br = min(block_rows, rows)
    grid = (pl.cdiv(rows, br),)
    row = pl.BlockSpec((br, n), lambda i: (i, 0))
    col = pl.BlockSpec((br, 1), lambda i: (i, 0))
    means = pl.pallas_call(_mean_kernel, grid=grid, in_specs=[row], out_specs=col,
                           out_shape=jax.ShapeDtypeStruct((rows, 1), jnp.float32))(x)
    return pl.pallas_call(_scale_kernel, grid=grid, in_specs=[row, col], out_specs=row,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, means)
