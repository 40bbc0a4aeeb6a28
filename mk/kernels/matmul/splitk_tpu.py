"""Split-K matmul on TPU (Mosaic): f32 partial products over K slabs in parallel, the sum and epilogue in XLA.

:mod:`mk.kernels.matmul.tpu` runs one program per output block and walks K on
the grid's last, sequential axis, so a product with few output blocks and a
long K keeps few cores busy. Here K is cut into ``k_splits`` slabs that are a
parallel grid axis: each program accumulates the f32 partial product of its
slab for one output block, XLA sums the slabs and runs ``epilogue(y,
*params)`` on whole arrays after the kernel (it fuses the sum and elementwise
work into one pass over the product). It trades one f32 (splits, M, N) round
trip through HBM for parallelism along K. Block sizes and ``k_splits`` are
requests, fitted to the sizes the kernel is called with (multiples of the TPU
tile, or the whole axis; the number of slabs a divisor of the K blocks).

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _block(n, want, quantum):
    """The largest multiple of quantum that divides n and is at most want; n itself when there is none."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def _divisor(n, want):
    """The largest divisor of n that is at most want (at least 1)."""
    return max(d for d in range(1, max(1, min(n, want)) + 1) if n % d == 0)


def _cast(v, dtypes):
    for dtype in dtypes:
        v = v.astype(dtype)
    return v


def _partial_kernel(x_ref, w_ref, o_ref, acc_ref, *, steps, dims, x_casts, w_casts, precision):
    @pl.when(pl.program_id(3) == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(_cast(x_ref[...], x_casts), _cast(w_ref[...], w_casts), dims,
                                    precision=precision, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(3) == steps - 1)
    def _store():
        o_ref[...] = acc_ref[...][None]


def splitk_product_tpu(x, w, *, transpose_w=False, x_casts=(), w_casts=(), precision=None, block_m=128,
                       block_n=128, block_k=128, k_splits=4):
    """The (splits, M, N) f32 partial products of x (M, K) and w over slabs of K."""
    (M, K), N = x.shape, w.shape[0 if transpose_w else 1]
    sublanes = 8 * max(1, 4 // jnp.dtype(x.dtype).itemsize)  # rows per sublane tile of x
    block_m = _block(M, block_m, sublanes)
    block_n = _block(N, block_n, 128)
    block_k = _block(K, block_k, 128)
    splits = _divisor(K // block_k, k_splits)
    steps = K // block_k // splits
    if transpose_w:
        w_spec = pl.BlockSpec((block_n, block_k), lambda s, m, n, k: (n, s * steps + k))
    else:
        w_spec = pl.BlockSpec((block_k, block_n), lambda s, m, n, k: (s * steps + k, n))
    return pl.pallas_call(
        functools.partial(_partial_kernel, steps=steps, dims=(((1,), (1 if transpose_w else 0,)), ((), ())),
                          x_casts=tuple(x_casts), w_casts=tuple(w_casts), precision=precision),
        grid=(splits, M // block_m, N // block_n, steps),
        in_specs=[pl.BlockSpec((block_m, block_k), lambda s, m, n, k: (m, s * steps + k)), w_spec],
        out_specs=pl.BlockSpec((1, block_m, block_n), lambda s, m, n, k: (s, m, n)),
        out_shape=jax.ShapeDtypeStruct((splits, M, N), jnp.float32),
        scratch_shapes=[pltpu.VMEM((block_m, block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(x, w)


def matmul_splitk_tpu(x, w, *params, epilogue=None, product_dtype=None, **kwargs):
    """``epilogue(sum of the partial products, *params)``: the sum and the epilogue run in XLA on whole arrays."""
    partial = splitk_product_tpu(x, w, **kwargs)
    casts = kwargs.get("x_casts", ()), kwargs.get("w_casts", ())
    product_dtype = product_dtype or jnp.result_type(casts[0][-1] if casts[0] else x.dtype,
                                                     casts[1][-1] if casts[1] else w.dtype)
    y = jnp.sum(partial, axis=0).astype(product_dtype)
    return y if epilogue is None else epilogue(y, *params)
