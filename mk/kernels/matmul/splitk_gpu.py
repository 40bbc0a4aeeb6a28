"""Split-K matmul on GPU (Pallas Triton): f32 partial products over K slabs in parallel, the sum and epilogue in XLA.

The same computation as :mod:`mk.kernels.matmul.splitk_tpu`: K is cut into
``k_splits`` slabs that are a parallel grid axis, each program loops over the
K blocks of its slab for one output block and writes the f32 partial
product; XLA sums the slabs and runs ``epilogue(y, *params)`` on whole arrays
after the kernel. Blocks are powers of two (Triton's rule): sizes are
zero-padded to them, and the number of slabs and their length too.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _fit(n, want):
    """(block, padded n): a power-of-two block >= 16 and at most want, n padded to a multiple of it."""
    b = max(16, min(_pow2(want), _pow2(n)))
    return b, -(-n // b) * b


def _pad_to(x, shape):
    widths = [(0, t - s) for s, t in zip(x.shape, shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


def _cast(v, dtypes):
    for dtype in dtypes:
        v = v.astype(dtype)
    return v


def _partial_kernel(x_ref, w_ref, o_ref, *, steps, block_k, block_n, transpose_w, x_casts, w_casts, precision):
    dims = (((1,), (1 if transpose_w else 0,)), ((), ()))

    def step(k, acc):
        x = x_ref[:, pl.ds(k * block_k, block_k)]
        w = w_ref[:, pl.ds(k * block_k, block_k)] if transpose_w else w_ref[pl.ds(k * block_k, block_k), :]
        return acc + lax.dot_general(_cast(x, x_casts), _cast(w, w_casts), dims, precision=precision,
                                     preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, steps, step, jnp.zeros((x_ref.shape[0], block_n), jnp.float32))
    o_ref[...] = acc[None]


def splitk_product_gpu(x, w, *, transpose_w=False, x_casts=(), w_casts=(), precision=None, block_m=64,
                       block_n=128, block_k=64, k_splits=4, num_warps=4, num_stages=2):
    """The (splits, M, N) f32 partial products of x (M, K) and w over slabs of K (sizes padded to powers of two)."""
    (M, K), N = x.shape, w.shape[0 if transpose_w else 1]
    block_m, m_pad = _fit(M, block_m)
    block_n, n_pad = _fit(N, block_n)
    block_k = max(16, min(_pow2(block_k), _pow2(K)))
    splits = min(_pow2(k_splits), _pow2(-(-K // block_k)))  # at most one slab per K block
    steps = _pow2(-(-K // (block_k * splits)))  # power-of-two slabs: Triton blocks are powers of two
    chunk = steps * block_k
    x = _pad_to(x, (m_pad, chunk * splits))
    if transpose_w:
        w = _pad_to(w, (n_pad, chunk * splits))
        w_spec = pl.BlockSpec((block_n, chunk), lambda m, n, s: (n, s))
    else:
        w = _pad_to(w, (chunk * splits, n_pad))
        w_spec = pl.BlockSpec((chunk, block_n), lambda m, n, s: (s, n))
    return pl.pallas_call(
        functools.partial(_partial_kernel, steps=steps, block_k=block_k, block_n=block_n, transpose_w=transpose_w,
                          x_casts=tuple(x_casts), w_casts=tuple(w_casts), precision=precision),
        grid=(m_pad // block_m, n_pad // block_n, splits),
        in_specs=[pl.BlockSpec((block_m, chunk), lambda m, n, s: (m, s)), w_spec],
        out_specs=pl.BlockSpec((1, block_m, block_n), lambda m, n, s: (s, m, n)),
        out_shape=jax.ShapeDtypeStruct((splits, m_pad, n_pad), jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(x, w)[:, :M, :N]


def matmul_splitk_gpu(x, w, *params, epilogue=None, product_dtype=None, **kwargs):
    """``epilogue(sum of the partial products, *params)``: the sum and the epilogue run in XLA on whole arrays."""
    partial = splitk_product_gpu(x, w, **kwargs)
    casts = kwargs.get("x_casts", ()), kwargs.get("w_casts", ())
    product_dtype = product_dtype or jnp.result_type(casts[0][-1] if casts[0] else x.dtype,
                                                     casts[1][-1] if casts[1] else w.dtype)
    y = jnp.sum(partial, axis=0).astype(product_dtype)
    return y if epilogue is None else epilogue(y, *params)
