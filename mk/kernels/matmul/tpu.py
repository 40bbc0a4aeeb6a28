"""Tiled matmul on TPU (Mosaic) with a fused epilogue.

``out = epilogue(x @ w, *params)`` for x (M, K) and w (K, N), or (N, K) with
``transpose_w``. The grid runs over (row block, column block, K block), K
last and sequential: each step adds one (block_m, block_k) x (block_k,
block_n) MXU product into an f32 VMEM accumulator, and the last step casts it
to ``product_dtype``, applies ``epilogue(acc, *param_blocks)`` to the finished
block and writes it, so the product never goes back to HBM before the
epilogue. Each parameter has a tiling kind: ``tile`` (one value per output,
(M, N)), ``row`` (one per row), ``col`` (one per column), ``scalar`` (one
number, read from SMEM); the epilogue sees each as a block of the rank it was
passed with (a scalar as a 0-d number). With ``full_n`` a program holds whole
rows (``block_n = N``), so the epilogue may reduce or reshape along N; its
output may then have fewer columns than N.

Block sizes are requests: each is fitted to the sizes the kernel is called
with (the largest multiple of the TPU tile dividing the size, or the whole
axis), so every request runs at every size.

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
    """The largest multiple of quantum that divides n and is at most want; n itself (one block spanning the axis,
    always a legal block shape) when there is none."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def _cast(v, dtypes):
    for dtype in dtypes:
        v = v.astype(dtype)
    return v


def _load(ref, kind, ndim):
    """A parameter block as the epilogue sees it: the rank it was passed with, a scalar as a 0-d number."""
    if kind == "scalar":
        return ref[0, 0]
    if kind == "col" and ndim == 1:
        return ref[...].reshape(ref.shape[-1:])
    if kind == "row" and ndim == 1:
        return ref[...][:, 0]
    return ref[...]


def _matmul_tpu_kernel(x_ref, w_ref, *refs, nk, dims, x_casts, w_casts, precision, product_dtype, kinds, ndims,
                       epilogue):
    p_refs, o_ref, acc_ref = refs[:-2], refs[-2], refs[-1]

    @pl.when(pl.program_id(2) == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(_cast(x_ref[...], x_casts), _cast(w_ref[...], w_casts), dims,
                                    precision=precision, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == nk - 1)
    def _store():
        params = [_load(r, kind, nd) for r, kind, nd in zip(p_refs, kinds, ndims)]
        out = epilogue(acc_ref[...].astype(product_dtype), *params)
        out = out.reshape(out.shape + (1,)) if out.ndim == 1 else out
        o_ref[...] = jnp.broadcast_to(out, o_ref.shape).astype(o_ref.dtype)


def _identity(acc):
    return acc


def matmul_tpu(x, w, *params, kinds=(), epilogue=None, transpose_w=False, x_casts=(), w_casts=(),
               product_dtype=None, out_dtype=None, precision=None, full_n=False, block_m=128, block_n=128,
               block_k=128):
    """``epilogue(x @ w, *params)``; ``kinds[i]`` is params[i]'s tiling: tile, row, col or scalar."""
    M, K = x.shape
    N = w.shape[0 if transpose_w else 1]
    if w.shape[1 if transpose_w else 0] != K or len(kinds) != len(params):
        raise ValueError(f"expected x (M, K), w {'(N, K)' if transpose_w else '(K, N)'} and a kind per parameter, "
                         f"got {x.shape=}, {w.shape=}, {len(params)} params, {kinds=}")
    epilogue = epilogue or _identity
    product_dtype = product_dtype or jnp.result_type(x_casts[-1] if x_casts else x.dtype,
                                                     w_casts[-1] if w_casts else w.dtype)
    out = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((M, N), product_dtype), *params)
    out_dtype = out_dtype or out.dtype
    # rows per sublane tile of the narrowest array tiled along rows (8 for 32-bit, 16 for 16-bit)
    rowwise = [x.dtype, out_dtype, *(p.dtype for p, k in zip(params, kinds) if k in ("tile", "row"))]
    sublanes = 8 * max(1, 4 // min(jnp.dtype(d).itemsize for d in rowwise))
    block_m = _block(M, block_m, sublanes)
    if full_n:
        block_n = N  # whole rows
    else:
        block_n = _block(N, block_n, 128)
    block_k = _block(K, block_k, 128)
    arrays, specs = [], []
    for p, kind in zip(params, kinds):
        if kind == "scalar":  # one number, from SMEM
            arrays.append(p.reshape((1, 1)))
            specs.append(pl.BlockSpec((1, 1), lambda m, n, k: (0, 0), memory_space=pltpu.SMEM))
        elif kind == "col":  # one value per column
            arrays.append(p.reshape((1, N)))
            specs.append(pl.BlockSpec((1, block_n), lambda m, n, k: (0, n)))
        elif kind == "row":  # one value per row
            arrays.append(p.reshape((M, 1)))
            specs.append(pl.BlockSpec((block_m, 1), lambda m, n, k: (m, 0)))
        elif kind == "tile":  # one value per output
            arrays.append(p)
            specs.append(pl.BlockSpec((block_m, block_n), lambda m, n, k: (m, n)))
        else:
            raise ValueError(f"a parameter's kind is tile, row, col or scalar, got {kind!r}")
    if out.shape != (M, N) and block_n != N:
        raise ValueError(f"the epilogue reduces along N (its output is {tuple(out.shape)}, not {(M, N)}), so one block "
                         f"must hold whole rows: pass full_n=True (block_n {block_n} < N {N})")
    if out.shape == (M, N):
        out_spec = pl.BlockSpec((block_m, block_n), lambda m, n, k: (m, n))
        out_shape = (M, N)
    else:  # the epilogue reduced along N: each block of whole rows writes its out_cols columns
        out_cols = out.shape[1] if out.ndim == 2 else 1
        out_spec = pl.BlockSpec((block_m, out_cols), lambda m, n, k: (m, 0))
        out_shape = (M, out_cols)
    if transpose_w:
        w_spec = pl.BlockSpec((block_n, block_k), lambda m, n, k: (n, k))
    else:
        w_spec = pl.BlockSpec((block_k, block_n), lambda m, n, k: (k, n))
    result = pl.pallas_call(
        functools.partial(_matmul_tpu_kernel, nk=K // block_k, dims=(((1,), (1 if transpose_w else 0,)), ((), ())),
                          x_casts=tuple(x_casts), w_casts=tuple(w_casts), precision=precision,
                          product_dtype=product_dtype, kinds=tuple(kinds), ndims=tuple(p.ndim for p in params),
                          epilogue=epilogue),
        grid=(M // block_m, N // block_n, K // block_k),
        in_specs=[pl.BlockSpec((block_m, block_k), lambda m, n, k: (m, k)), w_spec, *specs],
        out_specs=out_spec,
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype),
        scratch_shapes=[pltpu.VMEM((block_m, block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w, *arrays)
    return result.reshape(out.shape)
