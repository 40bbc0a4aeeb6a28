"""Tiled matmul on GPU (Pallas Triton) with a fused epilogue.

The same computation as :mod:`mk.kernels.matmul.tpu`: ``out = epilogue(x @
w, *params)``, x (M, K), w (K, N) or (N, K) with ``transpose_w``. One program
per (row block, column block) holds its rows of x and columns of w over all of
K and loops over K blocks inside the kernel, accumulating in f32; the finished
block is cast to ``product_dtype`` and goes through ``epilogue(acc,
*param_blocks)`` before it is written. Parameter kinds are those of the TPU
kernel (tile, row, col, scalar).

Triton blocks are powers of two: each block size is the largest power of two
>= 16 at most the request that divides the size, or, when none does, the size
is zero-padded to a multiple of a power-of-two block. Padded rows and columns
are sliced off the result; an epilogue that reduces along N (``full_n``: it sees
whole padded rows) must mask the padding itself. ``split``
(groups, group size): the epilogue splits each row into groups, so N is
padded group by group (each group to a power of two, then the number of
groups) and the epilogue's output ``out`` (a ShapeDtypeStruct) is given, since
the epilogue only ever sees padded rows.

Whole rows are planned at trace time from the sizes the kernel is called with
(`_mm_whole_rows`): one program holds ``block_m`` whole rows of the f32 product
and streams ``block_k`` x N slices of w through shared memory, so when that
working set does not fit ``smem_bytes`` (the chip's shared-memory budget) and
32 f32 accumulator values a thread (registers, with up to 8 warps), even at 16
rows and 16 of K, the kernel runs in two passes instead: a tiled product (``block_n`` columns a
program) writes the product in ``product_dtype``, then a row pass applies the
epilogue to a few whole rows a program (as many as keep about 32 values a thread
with up to 16 warps). The same numbers reach the epilogue either way.

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


def _block(n, want):
    """(block, padded n): the largest power of two (Triton's rule) >= 16 and at most want that divides n; when
    none does, a power of two block with n zero-padded to a multiple of it."""
    b = 1 << (want.bit_length() - 1)
    while b >= 16:
        if n % b == 0:
            return b, n
        b //= 2
    b = max(16, min(1 << (want.bit_length() - 1), 1 << (n - 1).bit_length()))
    return b, -(-n // b) * b


def _pad_to(x, shape):
    widths = [(0, t - s) for s, t in zip(x.shape, shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


def _pad_groups(x, axis, split):
    """x with its axis (split[0] groups of split[1]) padded group by group: each group to a power of two, then the
    number of groups, so the epilogue's reshape into groups splits the padded block the same way."""
    groups, size = split
    shape = x.shape[:axis] + (groups, size) + x.shape[axis + 1:]
    widths = [(0, 0)] * axis + [(0, _pow2(groups) - groups), (0, _pow2(size) - size)] + [(0, 0)] * (x.ndim - axis - 1)
    padded = jnp.pad(x.reshape(shape), widths)
    return padded.reshape(x.shape[:axis] + (_pow2(groups) * _pow2(size),) + x.shape[axis + 1:])


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


def _matmul_gpu_kernel(x_ref, w_ref, *refs, nk, block_k, block_n, transpose_w, x_casts, w_casts, precision,
                       product_dtype, kinds, ndims, epilogue):
    p_refs, o_ref = refs[:-1], refs[-1]
    dims = (((1,), (1 if transpose_w else 0,)), ((), ()))

    def step(k, acc):
        x = x_ref[:, pl.ds(k * block_k, block_k)]
        w = w_ref[:, pl.ds(k * block_k, block_k)] if transpose_w else w_ref[pl.ds(k * block_k, block_k), :]
        return acc + lax.dot_general(_cast(x, x_casts), _cast(w, w_casts), dims, precision=precision,
                                     preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, nk, step, jnp.zeros((x_ref.shape[0], block_n), jnp.float32))
    params = [_load(r, kind, nd) for r, kind, nd in zip(p_refs, kinds, ndims)]
    out = epilogue(acc.astype(product_dtype), *params)
    out = out.reshape(out.shape + (1,)) if out.ndim == 1 else out
    o_ref[...] = jnp.broadcast_to(out, o_ref.shape).astype(o_ref.dtype)


def _identity(acc):
    return acc


def _mm_rows_kernel(y_ref, *refs, kinds, ndims, epilogue):
    """The second pass of whole rows too wide for one program's product: the epilogue on rows of the product."""
    p_refs, o_ref = refs[:-1], refs[-1]
    params = [_load(r, kind, nd) for r, kind, nd in zip(p_refs, kinds, ndims)]
    out = epilogue(y_ref[...], *params)
    out = out.reshape(out.shape + (1,)) if out.ndim == 1 else out
    o_ref[...] = jnp.broadcast_to(out, o_ref.shape).astype(o_ref.dtype)


#: f32 accumulator values a thread may hold (a program's block over 32 x num_warps threads): 64 already reaches
#: 255 registers with spills for a full-precision (HIGHEST) product of a transposed w on H100
_MM_ACC = 32


def _mm_smem(bm, bn, bk, itemsize, num_stages):
    """Estimated shared memory of the K loop: ``num_stages`` (bm, bk) and (bk, bn) slices."""
    return num_stages * (bm * bk + bk * bn) * itemsize


def _mm_fit_k(bm, bn, bk, itemsize, num_stages, smem_bytes):
    """block_k halved (not below 16) until the K loop's slices fit smem_bytes."""
    while bk > 16 and _mm_smem(bm, bn, bk, itemsize, num_stages) > smem_bytes:
        bk //= 2
    return bk


def _mm_whole_rows(bm, bk, n_pad, itemsize, num_warps, num_stages, smem_bytes, fma=False):
    """(block_m, block_k, num_warps) for programs holding whole rows of n_pad columns: block_m halved (not below
    16), then up to 8 warps, until the f32 accumulator is at most _MM_ACC values a thread, and block_k halved
    until the slices of x and w fit smem_bytes; ``fma`` (an f32 product at HIGHEST precision: no tensor cores, the
    slices in registers too): block_k first halved until accumulator and slices are 3 x _MM_ACC values a thread.
    None when even that does not fit (the two-pass form)."""
    while bm > 16 and bm * n_pad > _MM_ACC * 32 * num_warps:
        bm //= 2
    while num_warps < 8 and bm * n_pad > _MM_ACC * 32 * num_warps:
        num_warps *= 2
    while fma and bk > 16 and bm * n_pad + bk * (bm + n_pad) > 3 * _MM_ACC * 32 * num_warps:
        bk //= 2  # a full-precision f32 product runs on FMA units with both slices in registers
    bk = _mm_fit_k(bm, n_pad, bk, itemsize, num_stages, smem_bytes)
    if bm * n_pad > _MM_ACC * 32 * num_warps or _mm_smem(bm, n_pad, bk, itemsize, num_stages) > smem_bytes:
        return None
    return bm, bk, num_warps


def _mm_param_specs(kinds, bm, bn, rows_only):
    """Each parameter's block: (bm, bn) tiles, (bm, 1) rows, (1, bn) columns, (1, 1) scalars; ``rows_only``: on a
    grid of row blocks alone (whole rows, bn the padded row)."""
    if rows_only:
        maps = {"scalar": lambda m: (0, 0), "col": lambda m: (0, 0), "row": lambda m: (m, 0),
                "tile": lambda m: (m, 0)}
    else:
        maps = {"scalar": lambda m, n: (0, 0), "col": lambda m, n: (0, n), "row": lambda m, n: (m, 0),
                "tile": lambda m, n: (m, n)}
    shapes = {"scalar": (1, 1), "col": (1, bn), "row": (bm, 1), "tile": (bm, bn)}
    return [pl.BlockSpec(shapes[k], maps[k]) for k in kinds]


def matmul_gpu(x, w, *params, kinds=(), epilogue=None, transpose_w=False, x_casts=(), w_casts=(),
               product_dtype=None, out_dtype=None, precision=None, full_n=False, split=None, out=None, block_m=64,
               block_n=128, block_k=64, num_warps=4, num_stages=2, smem_bytes=192 << 10):
    """``epilogue(x @ w, *params)`` on power-of-two blocks; ``kinds[i]`` is params[i]'s tiling: tile, row, col or
    scalar. ``smem_bytes``: the shared memory a program may plan for (the blocks are fitted to it)."""
    M, K = x.shape
    N = w.shape[0 if transpose_w else 1]
    if w.shape[1 if transpose_w else 0] != K or len(kinds) != len(params):
        raise ValueError(f"expected x (M, K), w {'(N, K)' if transpose_w else '(K, N)'} and a kind per parameter, "
                         f"got {x.shape=}, {w.shape=}, {len(params)} params, {kinds=}")
    if split is not None and out is None:
        raise ValueError("with split the epilogue's output (out) must be given: it only sees padded rows")
    epilogue = epilogue or _identity
    product_dtype = product_dtype or jnp.result_type(x_casts[-1] if x_casts else x.dtype,
                                                     w_casts[-1] if w_casts else w.dtype)
    if out is None:
        out = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((M, N), product_dtype), *params)
    itemsize = max(jnp.dtype(d).itemsize for d in (x.dtype, w.dtype, *x_casts, *w_casts))
    block_k, k_pad = _block(K, block_k)
    if split is not None:
        n_pad = _pow2(split[0]) * _pow2(split[1])  # whole rows, padded group by group
        w = _pad_groups(w, 0 if transpose_w else 1, split)
    elif full_n:
        n_pad = max(16, _pow2(N))  # whole (padded) rows
    whole = split is not None or full_n
    two_pass = False
    if whole:
        fma = itemsize == 4 and any(p == lax.Precision.HIGHEST for p in
                                    (precision if isinstance(precision, (tuple, list)) else (precision,)))
        fit = _mm_whole_rows(_block(M, block_m)[0], block_k, n_pad, itemsize, num_warps, num_stages, smem_bytes,
                             fma)
        two_pass = fit is None
        if two_pass:  # a tiled product, then the epilogue on rows: blocks of a plain product
            block_m, m_pad = _block(M, max(block_m, 64))
            block_n = max(16, min(1 << (block_n.bit_length() - 1), n_pad))
            block_k = _mm_fit_k(block_m, block_n, block_k, itemsize, num_stages, smem_bytes)
            while num_warps < 8 and block_m * block_n > _MM_ACC * 32 * num_warps:
                num_warps *= 2
        else:
            block_m, block_k, num_warps = fit
            block_m, m_pad = _block(M, block_m)
            block_n = n_pad
    else:
        block_m, m_pad = _block(M, block_m)
        block_n, n_pad = _block(N, block_n)
        block_k = _mm_fit_k(block_m, block_n, block_k, itemsize, num_stages, smem_bytes)
    x = _pad_to(x, (m_pad, k_pad))
    w = _pad_to(w, (n_pad, k_pad) if transpose_w else (k_pad, n_pad))
    arrays = []
    for p, kind in zip(params, kinds):
        if kind == "scalar":  # one number
            arrays.append(p.reshape((1, 1)))
        elif kind == "col":  # one value per column
            col = p.reshape((1, N))
            arrays.append(_pad_groups(col, 1, split) if split is not None else _pad_to(col, (1, n_pad)))
        elif kind == "row":  # one value per row
            arrays.append(_pad_to(p.reshape((M, 1)), (m_pad, 1)))
        elif kind == "tile":  # one value per output
            arrays.append(_pad_groups(_pad_to(p, (m_pad, N)), 1, split) if split is not None
                          else _pad_to(p, (m_pad, n_pad)))
        else:
            raise ValueError(f"a parameter's kind is tile, row, col or scalar, got {kind!r}")
    elementwise = tuple(out.shape) == (M, N)
    if not elementwise and not whole and block_n != n_pad:
        raise ValueError(f"the epilogue reduces along N (its output is {tuple(out.shape)}, not {(M, N)}), so one block "
                         f"must hold whole rows: pass full_n=True (block_n {block_n} < N {N})")
    out_cols = n_pad if elementwise else (out.shape[1] if out.ndim == 2 else 1)
    if transpose_w:
        w_spec = pl.BlockSpec((block_n, k_pad), lambda m, n: (n, 0))
    else:
        w_spec = pl.BlockSpec((k_pad, block_n), lambda m, n: (0, n))
    product = functools.partial(_matmul_gpu_kernel, nk=k_pad // block_k, block_k=block_k, block_n=block_n,
                                transpose_w=transpose_w, x_casts=tuple(x_casts), w_casts=tuple(w_casts),
                                precision=precision, product_dtype=product_dtype)
    x_spec = pl.BlockSpec((block_m, k_pad), lambda m, n: (m, 0))
    grid = (m_pad // block_m, n_pad // block_n)
    if two_pass:
        y = pl.pallas_call(
            functools.partial(product, kinds=(), ndims=(), epilogue=_identity),
            grid=grid,
            in_specs=[x_spec, w_spec],
            out_specs=pl.BlockSpec((block_m, block_n), lambda m, n: (m, n)),
            out_shape=jax.ShapeDtypeStruct((m_pad, n_pad), product_dtype),
            compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        )(x, w)
        row_warps = 4
        while row_warps < 16 and n_pad > 32 * 32 * row_warps:
            row_warps *= 2
        block_r = max(1, min(16, block_m, 32 * 32 * row_warps // n_pad))
        result = pl.pallas_call(
            functools.partial(_mm_rows_kernel, kinds=tuple(kinds), ndims=tuple(p.ndim for p in params),
                              epilogue=epilogue),
            grid=(m_pad // block_r,),
            in_specs=[pl.BlockSpec((block_r, n_pad), lambda m: (m, 0)),
                      *_mm_param_specs(kinds, block_r, n_pad, True)],
            out_specs=pl.BlockSpec((block_r, out_cols), lambda m: (m, 0)),
            out_shape=jax.ShapeDtypeStruct((m_pad, out_cols), out_dtype or out.dtype),
            compiler_params=pltriton.CompilerParams(num_warps=row_warps, num_stages=1),
        )(y, *arrays)
    else:
        if elementwise:
            out_spec = pl.BlockSpec((block_m, block_n), lambda m, n: (m, n))
        else:  # the epilogue reduced along N: each block of whole rows writes its out_cols columns
            out_spec = pl.BlockSpec((block_m, out_cols), lambda m, n: (m, 0))
        result = pl.pallas_call(
            functools.partial(product, kinds=tuple(kinds), ndims=tuple(p.ndim for p in params), epilogue=epilogue),
            grid=grid,
            in_specs=[x_spec, w_spec, *_mm_param_specs(kinds, block_m, block_n, False)],
            out_specs=out_spec,
            out_shape=jax.ShapeDtypeStruct((m_pad, out_cols), out_dtype or out.dtype),
            compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        )(x, w, *arrays)
    if split is not None and elementwise:
        groups, size = split
        return result[:M].reshape((M, _pow2(groups), _pow2(size)))[:, :groups, :size].reshape(out.shape)
    return result[:M, :N if elementwise else out_cols].reshape(out.shape)
