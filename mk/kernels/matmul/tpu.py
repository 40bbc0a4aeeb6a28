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
rows, so the epilogue may reduce or reshape along N; its output may then have
fewer columns than N. The rows' f32 accumulator is then (block_m, N), kept in
VMEM as N // block_n column slabs that the grid's second (sequential) axis
fills one (block_k, block_n) weight block at a time, so the weight block never
spans all of N; the epilogue runs once on the whole rows after the last slab's
last K step.

Block sizes are requests: each is fitted to the sizes the kernel is called
with (the largest multiple of the TPU tile dividing the size, or the whole
axis), then shrunk at trace time until one step's working set
(:func:`matmul_vmem_bytes`: every block double-buffered, padded to the
(sublane, lane) tile, the f32 accumulator, with whole rows a copy of the rows
for the epilogue) fits 3/4 of the scoped VMEM a kernel gets by default on the
chip being compiled for (v5e 16 MiB, v6e 32 MiB): with whole rows the columns
per weight block first (all of N when it fits), then K, then rows. When even the
smallest blocks do not fit (a very wide N), the kernel asks for the VMEM it needs
(``vmem_limit_bytes``), up to 15/16 of the physical VMEM.

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


def _blocks(n, want, quantum):
    """Candidate blocks along an axis of size n, largest first: :func:`_block`'s fit of the request, then every
    smaller multiple of quantum dividing n."""
    first = _block(n, want, quantum)
    return [first] + [b for b in range(min(first, n - 1) // quantum * quantum, 0, -quantum) if b < first and n % b == 0]


def _vmem_limits():
    """(scoped VMEM a kernel gets by default, physical VMEM) of the TPU being compiled for; v5e's figures when
    Mosaic knows no chip (interpret mode on a CPU)."""
    if "tpu" not in str(getattr(jax.devices()[0], "device_kind", "")).lower():
        return 16 << 20, 128 << 20  # no TPU known here: plan for the smallest scoped VMEM
    info = pltpu.get_tpu_info()
    return (32 << 20 if info.generation >= 6 else 16 << 20), int(info.vmem_capacity_bytes)


def _padded(rows, cols, itemsize):
    """VMEM bytes of a (rows, cols) block padded to the (sublane, lane) tile of its dtype."""
    sub = 8 * max(1, 4 // itemsize)
    return -(-rows // sub) * sub * -(-cols // 128) * 128 * itemsize


def matmul_vmem_bytes(bm, bn, bk, n, *, x_itemsize=4, w_itemsize=4, out_cols=None, out_itemsize=4, full_n=False,
                      tile_itemsizes=(), row_itemsizes=(), col_itemsizes=(), transpose_w=False):
    """VMEM of one grid step: the x and w blocks, the output block and the parameters' blocks double-buffered; the
    f32 accumulator ((block_m, N) with whole rows, as N // block_n slabs); with whole rows one more f32 copy of the
    rows (the epilogue's input). Blocks padded to the (sublane, lane) tile. ``out_cols``: columns the epilogue
    writes per row with whole rows (N when None)."""
    width = n if full_n else bn
    total = 2 * _padded(bm, bk, x_itemsize)
    total += 2 * (_padded(bn, bk, w_itemsize) if transpose_w else _padded(bk, bn, w_itemsize))
    total += (n // bn if full_n else 1) * _padded(bm, bn, 4)
    total += 2 * _padded(bm, (out_cols or width) if full_n else bn, out_itemsize)
    total += sum(2 * _padded(bm, width, i) for i in tile_itemsizes)
    total += sum(2 * _padded(bm, 1, i) for i in row_itemsizes)
    total += sum(2 * _padded(1, width, i) for i in col_itemsizes)
    if full_n:
        total += _padded(bm, n, 4)
    return total


def matmul_blocks(m, n, k, *, block_m, block_n, block_k, sublanes, budget, full_n=False, **sizes):
    """(block_m, block_n, block_k, bytes): the requests fitted to the sizes, shrunk until
    :func:`matmul_vmem_bytes` fits ``budget``: the columns first (with whole rows all of N when it fits, else the
    widest multiple of 128 dividing N), then K, then the rows. When nothing fits: the smallest blocks."""
    bms = _blocks(m, block_m, sublanes)
    bns = ([n] + [b for b in _blocks(n, n, 128) if b < n]) if full_n else _blocks(n, block_n, 128)
    bks = _blocks(k, block_k, 128)
    need = lambda bm, bn, bk: matmul_vmem_bytes(bm, bn, bk, n, full_n=full_n, **sizes)  # noqa: E731
    for bm in bms:
        for bn in bns:
            for bk in bks:
                if need(bm, bn, bk) <= budget:
                    return bm, bn, bk, need(bm, bn, bk)
    return bms[-1], bns[-1], bks[-1], need(bms[-1], bns[-1], bks[-1])


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


def _matmul_tpu_kernel(x_ref, w_ref, *refs, nk, nn, dims, x_casts, w_casts, precision, product_dtype, kinds, ndims,
                       epilogue):
    p_refs, o_ref, acc_ref = refs[:-2], refs[-2], refs[-1]
    # acc_ref: (nn, block_m, block_n) f32; with whole rows (nn = N // block_n) slab n holds columns n*block_n...
    slab = pl.program_id(1) if nn > 1 else 0

    @pl.when(pl.program_id(2) == 0)
    def _zero():
        acc_ref[slab] = jnp.zeros(acc_ref.shape[1:], acc_ref.dtype)

    acc_ref[slab] += lax.dot_general(_cast(x_ref[...], x_casts), _cast(w_ref[...], w_casts), dims,
                                     precision=precision, preferred_element_type=jnp.float32)

    last = pl.program_id(2) == nk - 1
    if nn > 1:  # whole rows: the epilogue runs after the last slab is finished
        last = jnp.logical_and(last, pl.program_id(1) == nn - 1)

    @pl.when(last)
    def _store():
        params = [_load(r, kind, nd) for r, kind, nd in zip(p_refs, kinds, ndims)]
        acc = acc_ref[0] if nn == 1 else jnp.concatenate([acc_ref[i] for i in range(nn)], axis=1)
        out = epilogue(acc.astype(product_dtype), *params)
        out = out.reshape(out.shape + (1,)) if out.ndim == 1 else out
        o_ref[...] = jnp.broadcast_to(out, o_ref.shape).astype(o_ref.dtype)


def _identity(acc):
    return acc


def matmul_tpu(x, w, *params, kinds=(), epilogue=None, transpose_w=False, x_casts=(), w_casts=(),
               product_dtype=None, out_dtype=None, precision=None, full_n=False, block_m=128, block_n=128,
               block_k=128, vmem_budget=None):
    """``epilogue(x @ w, *params)``; ``kinds[i]`` is params[i]'s tiling: tile, row, col or scalar. Blocks are
    requests, shrunk at trace time to fit ``vmem_budget`` bytes (default 3/4 of the chip's scoped VMEM)."""
    M, K = x.shape
    N = w.shape[0 if transpose_w else 1]
    if w.shape[1 if transpose_w else 0] != K or len(kinds) != len(params):
        raise ValueError(f"expected x (M, K), w {'(N, K)' if transpose_w else '(K, N)'} and a kind per parameter, "
                         f"got {x.shape=}, {w.shape=}, {len(params)} params, {kinds=}")
    for kind in kinds:
        if kind not in ("scalar", "col", "row", "tile"):
            raise ValueError(f"a parameter's kind is tile, row, col or scalar, got {kind!r}")
    epilogue = epilogue or _identity
    product_dtype = product_dtype or jnp.result_type(x_casts[-1] if x_casts else x.dtype,
                                                     w_casts[-1] if w_casts else w.dtype)
    out = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((M, N), product_dtype), *params)
    out_dtype = out_dtype or out.dtype
    if out.shape != (M, N) and not full_n:
        if _block(N, block_n, 128) != N:
            raise ValueError(f"the epilogue reduces along N (its output is {tuple(out.shape)}, not {(M, N)}), so one "
                             f"block must hold whole rows: pass full_n=True (block_n {block_n} < N {N})")
        full_n = True  # one block of whole rows was asked for anyway
    out_cols = N if out.shape == (M, N) else (out.shape[1] if out.ndim == 2 else 1)
    # rows per sublane tile of the narrowest array tiled along rows (8 for 32-bit, 16 for 16-bit)
    rowwise = [x.dtype, out_dtype, *(p.dtype for p, k in zip(params, kinds) if k in ("tile", "row"))]
    sublanes = 8 * max(1, 4 // min(jnp.dtype(d).itemsize for d in rowwise))
    scoped, physical = _vmem_limits()
    budget = vmem_budget or scoped * 3 // 4
    sizes = {k: tuple(jnp.dtype(p.dtype).itemsize for p, kd in zip(params, kinds) if kd == k)
             for k in ("tile", "row", "col")}
    block_m, block_n, block_k, need = matmul_blocks(
        M, N, K, block_m=block_m, block_n=block_n, block_k=block_k, sublanes=sublanes, budget=budget, full_n=full_n,
        x_itemsize=jnp.dtype(x.dtype).itemsize, w_itemsize=jnp.dtype(w.dtype).itemsize, out_cols=out_cols,
        out_itemsize=jnp.dtype(out_dtype).itemsize, tile_itemsizes=sizes["tile"], row_itemsizes=sizes["row"],
        col_itemsizes=sizes["col"], transpose_w=transpose_w)
    nn = N // block_n if full_n else 1  # column slabs of the whole rows' accumulator
    width = N if full_n else block_n  # columns of the parameter and output blocks
    col_index = (lambda m, n, k: (0, 0)) if full_n else (lambda m, n, k: (0, n))
    tile_index = (lambda m, n, k: (m, 0)) if full_n else (lambda m, n, k: (m, n))
    arrays, specs = [], []
    for p, kind in zip(params, kinds):
        if kind == "scalar":  # one number, from SMEM
            arrays.append(p.reshape((1, 1)))
            specs.append(pl.BlockSpec((1, 1), lambda m, n, k: (0, 0), memory_space=pltpu.SMEM))
        elif kind == "col":  # one value per column
            arrays.append(p.reshape((1, N)))
            specs.append(pl.BlockSpec((1, width), col_index))
        elif kind == "row":  # one value per row
            arrays.append(p.reshape((M, 1)))
            specs.append(pl.BlockSpec((block_m, 1), lambda m, n, k: (m, 0)))
        else:  # tile: one value per output
            arrays.append(p)
            specs.append(pl.BlockSpec((block_m, width), tile_index))
    if out.shape == (M, N):
        out_spec = pl.BlockSpec((block_m, width), tile_index)
        out_shape = (M, N)
    else:  # the epilogue reduced along N: each block of whole rows writes its out_cols columns
        out_spec = pl.BlockSpec((block_m, out_cols), lambda m, n, k: (m, 0))
        out_shape = (M, out_cols)
    if transpose_w:
        w_spec = pl.BlockSpec((block_n, block_k), lambda m, n, k: (n, k))
    else:
        w_spec = pl.BlockSpec((block_k, block_n), lambda m, n, k: (k, n))
    params_c = {}
    if need > budget:  # even the smallest blocks do not fit: ask for the VMEM they need, up to the physical VMEM
        params_c["vmem_limit_bytes"] = int(min(max(scoped, need * 5 // 4 + (4 << 20)), physical * 15 // 16))
    result = pl.pallas_call(
        functools.partial(_matmul_tpu_kernel, nk=K // block_k, nn=nn,
                          dims=(((1,), (1 if transpose_w else 0,)), ((), ())),
                          x_casts=tuple(x_casts), w_casts=tuple(w_casts), precision=precision,
                          product_dtype=product_dtype, kinds=tuple(kinds), ndims=tuple(p.ndim for p in params),
                          epilogue=epilogue),
        grid=(M // block_m, N // block_n, K // block_k),
        in_specs=[pl.BlockSpec((block_m, block_k), lambda m, n, k: (m, k)), w_spec, *specs],
        out_specs=out_spec,
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype),
        scratch_shapes=[pltpu.VMEM((nn, block_m, block_n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary" if full_n else "parallel", "arbitrary"), **params_c),
    )(x, w, *arrays)
    return result.reshape(out.shape)
