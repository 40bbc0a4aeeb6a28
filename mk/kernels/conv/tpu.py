"""Convolution as an implicit GEMM on TPU (Mosaic), with a fused epilogue.

Stride-1, undilated, ungrouped convolution of a channels-last input ``x``
(N, *S, Cin) with a window ``w`` (*K, Cin, Cout), 1 to 3 spatial axes, VALID
(pad the input first for other paddings). The grid runs over samples, blocks of
``block_rows`` rows of the first output spatial axis and output-channel blocks;
each program brings its rows of the sample into VMEM with the window's halo
(an element-offset block), and for every output row (all output spatial axes but
the last, flattened) adds one (Wo, Cin) x (Cin, block_cout) MXU product per
window offset into an f32 VMEM tile. No patch matrix is ever built: the window
offsets are static slices of the rows already in VMEM.

The finished tile goes through ``epilogue(tile, *params)`` before it is
written, so work after the convolution (bias, activations, norms over the
sample, pooling, channel reductions) never round-trips to HBM. With an epilogue
a program holds all output channels (``block_cout`` = Cout); ``params`` (small
arrays: biases, norm weights) reach every program whole. An epilogue that
treats the rows of the first output spatial axis independently
(``rows_independent``: pointwise work, channel reductions, norms over the other
axes) runs on each row block; any other epilogue (statistics over the sample)
runs once per sample on an f32 tile of the whole sample that the row blocks fill.

Block sizes not given are planned at trace time for the shapes the kernel is
called with (:func:`conv_blocks`), against the VMEM a kernel gets by default on
the chip being compiled for, with the (sublane, lane) padding of every block
counted; a whole-sample tile past it raises the kernel's VMEM limit toward the
physical VMEM.

This file is self-contained (jax only): mk's offline author copies it verbatim
into the kernels it writes.
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _conv_vmem_limits():
    """(scoped VMEM a kernel gets by default, physical VMEM) of the TPU being compiled for; v5e's figures when
    Mosaic knows no chip (interpret mode on a CPU)."""
    if "tpu" not in str(getattr(jax.devices()[0], "device_kind", "")).lower():
        return 16 << 20, 128 << 20  # no TPU known here: plan for the smallest scoped VMEM
    info = pltpu.get_tpu_info()
    return (32 << 20 if info.generation >= 6 else 16 << 20), int(info.vmem_capacity_bytes)


def _conv_padded_bytes(shape, itemsize):
    """VMEM bytes of a block: its last two axes padded to the (sublane, lane) tile of its dtype."""
    shape = (1,) * (2 - len(shape)) + tuple(shape)
    sub = 8 * max(1, 4 // itemsize)
    return math.prod(shape[:-2]) * -(-shape[-2] // sub) * sub * -(-shape[-1] // 128) * 128 * itemsize


def conv_vmem_bytes(x_shape, w_shape, block_rows, block_cout, *, itemsize=4, out_itemsize=4, epilogue=False,
                    whole=False, unroll=1):
    """VMEM one program holds: the rows of the sample with their halo and the weight block, double-buffered; the
    f32 tile (the whole sample's with ``whole``); the output block, double-buffered; with an epilogue, room for
    its temporaries (three tiles); the per-row products in flight."""
    s = len(x_shape) - 2
    window, cin = tuple(w_shape[:s]), x_shape[-1]
    out_spatial = tuple(n - k + 1 for n, k in zip(x_shape[1:-1], window))
    rows = -(-out_spatial[0] // block_rows) * block_rows if whole else block_rows
    x_blk = (block_rows + window[0] - 1 + (7 if s == 1 else 0), *x_shape[2:-1], cin)
    tile = (rows, *out_spatial[1:], block_cout)
    acc = _conv_padded_bytes(tile, 4)
    total = 2 * _conv_padded_bytes(x_blk, itemsize) + 2 * _conv_padded_bytes((*window, cin, block_cout), itemsize)
    total += acc + 2 * _conv_padded_bytes(tile, out_itemsize) + (3 * acc if epilogue else 0)
    wo = out_spatial[-1] if s > 1 else block_rows
    total += max(1, unroll) * (3 * _conv_padded_bytes((wo, block_cout), 4) + _conv_padded_bytes((wo, cin), itemsize))
    return total


def conv_blocks(x_shape, w_shape, *, budget, itemsize=4, out_itemsize=4, epilogue=False, whole=False, unroll=1,
                row_align=1, block_rows=None, block_cout=None):
    """(block_rows, block_cout, bytes): the largest blocks whose working set (:func:`conv_vmem_bytes`) fits
    ``budget`` bytes: all output channels when some row block fits with them (an epilogue always takes them all),
    else the widest multiple of 128 dividing Cout; then the most rows of the first output spatial axis (a multiple
    of ``row_align`` or all of them; a divisor of them when one is near, so no row block is ragged). Blocks given
    are kept. When nothing fits: the smallest blocks."""
    s = len(x_shape) - 2
    cout = w_shape[-1]
    o1 = x_shape[1] - w_shape[0] + 1
    align = max(row_align, 8 if s == 1 else 1)
    if block_cout is not None:
        couts = [block_cout]
    elif epilogue:
        couts = [cout]
    else:
        couts = [cout] + [b for b in range(cout - cout % 128, 127, -128) if b < cout and cout % b == 0]
    if block_rows is not None:
        rows = [block_rows]
    else:
        cands = {o1}
        for n in range(1, o1 + 1):
            b = -(-o1 // n)
            b = -(-b // align) * align
            if b < o1:
                cands.add(b)
        rows = sorted(cands, reverse=True)
    need = functools.partial(conv_vmem_bytes, x_shape, w_shape, itemsize=itemsize, out_itemsize=out_itemsize,
                             epilogue=epilogue, whole=whole, unroll=unroll)
    for bc in couts:
        fits = [b for b in rows if need(b, bc) <= budget]
        if fits and (bc == couts[-1] or fits[0] >= min(o1, 8)):
            best = fits[0]
            # a divisor of the rows within 3/4 of the best: no ragged last block (no padded copy of x)
            even = [b for b in fits if o1 % b == 0 and 4 * b >= 3 * best]
            best = even[0] if even else best
            return best, bc, need(best, bc)
    return rows[-1], couts[-1], need(rows[-1], couts[-1])


def _conv_tpu_kernel(x_ref, w_ref, *refs, out_spatial, window, n_params, epilogue, precision, unroll, whole,
                     n_rows):
    p_refs, o_ref, acc_ref = refs[:n_params], refs[n_params], refs[n_params + 1]
    lead, wo = out_spatial[:-1], out_spatial[-1]  # of this program's rows
    base = pl.program_id(1) * out_spatial[0] if whole else 0

    def row(r, carry):
        idx, rest = [], r
        for size in reversed(lead):  # r -> (o_1, ..., o_{s-1}), row-major
            idx.append(rest % size)
            rest = rest // size
        idx = idx[::-1]
        acc = jnp.zeros((wo, acc_ref.shape[-1]), jnp.float32)
        for off in itertools.product(*(range(k) for k in window)):
            at = (0, *(i + o for i, o in zip(idx, off[:-1])), pl.ds(off[-1], wo), slice(None))
            acc += lax.dot_general(x_ref[at], w_ref[off], (((1,), (0,)), ((), ())), precision=precision,
                                   preferred_element_type=jnp.float32)
        if not idx:  # one spatial axis: the rows are the tile's sublanes
            acc_ref[pl.ds(base, wo) if whole else slice(None)] = acc
        else:
            acc_ref[(base + idx[0], *idx[1:])] = acc
        return carry

    lax.fori_loop(0, math.prod(lead), row, 0, unroll=max(1, min(unroll, math.prod(lead))))

    def finish():
        tile = (acc_ref[:n_rows] if whole else acc_ref[...])[None]
        out = epilogue(tile, *(p[...] for p in p_refs))
        o_ref[...] = out.reshape(o_ref.shape).astype(o_ref.dtype)

    if whole:
        pl.when(pl.program_id(1) == pl.num_programs(1) - 1)(finish)
    else:
        finish()


def _bias_epilogue(tile, bias):
    return tile + bias.reshape(bias.shape[-1:])


def _conv_row_axis(epilogue, params, out_spatial, cout, rows):
    """The axis of the epilogue's output that carries the tile's first spatial axis one to one: the one axis whose
    size follows the tile's row count (traced for two counts); None when there is none."""
    shapes = []
    for n in (rows, rows + 1):
        tile = jax.ShapeDtypeStruct((1, n, *out_spatial[1:], cout), jnp.float32)
        shapes.append(jax.eval_shape(epilogue, tile, *params).shape)
    a, b = shapes
    if len(a) != len(b):
        return None
    moved = [i for i, (p, q) in enumerate(zip(a, b)) if p != q]
    if len(moved) != 1 or a[moved[0]] != rows or b[moved[0]] != rows + 1 or moved[0] == 0:
        return None
    return moved[0]


def conv_tpu(x, w, *params, epilogue=None, bias=None, out_dtype=None, precision=None, block_cout=None, unroll=1,
             block_rows=None, rows_independent=False, vmem_budget=None):
    """``epilogue(conv(x, w) + bias)`` per sample, channels last. ``block_cout`` (a multiple of 128 dividing Cout,
    or None for all channels) only applies without an epilogue; ``block_rows``: rows of the first output spatial
    axis per program; both planned for these shapes when None (``vmem_budget`` bytes, default 3/4 of the chip's
    scoped VMEM). ``rows_independent``: the epilogue treats those rows independently (else it gets the whole
    sample). ``unroll``: output rows per loop step."""
    s = x.ndim - 2
    window, cin, cout = w.shape[:s], w.shape[s], w.shape[s + 1]
    if not 1 <= s <= 3 or w.ndim != s + 2 or x.shape[-1] != cin:
        raise ValueError(f"expected x (N, *S, Cin) and w (*K, Cin, Cout) with 1-3 spatial axes, got {x.shape=}, {w.shape=}")
    out_spatial = tuple(n - k + 1 for n, k in zip(x.shape[1:-1], window))
    if min(out_spatial) < 1:
        raise ValueError(f"the window {window} is larger than the input's spatial size {x.shape[1:-1]}")
    batch, o1 = x.shape[0], out_spatial[0]
    scoped, physical = _conv_vmem_limits()
    budget = vmem_budget or scoped * 3 // 4
    itemsize = jnp.dtype(x.dtype).itemsize
    fused = epilogue is not None
    row_axis = None
    if not fused:
        if block_cout is not None and (cout % block_cout or (block_cout != cout and block_cout % 128)):
            raise ValueError(f"block_cout={block_cout} must divide Cout={cout} and be a multiple of 128 (or Cout)")
        if bias is not None:
            params, epilogue = (bias.reshape(1, cout),), _bias_epilogue
        else:
            params, epilogue = (), lambda tile: tile
        whole, row_align = False, 1
    else:
        if bias is not None:
            raise ValueError("pass the bias to the epilogue as one of its params")
        block_cout = cout
        if rows_independent:
            row_axis = _conv_row_axis(epilogue, params, out_spatial, cout, max(2, o1))
        whole = row_axis is None
        tile_out = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, *out_spatial, cout), jnp.float32), *params)
        nd = len(tile_out.shape)  # the output gets one more leading axis of 1 (the batch block is never a tile axis)
        row_align = 1 if whole else (8 if row_axis == nd - 2 else 128 if row_axis == nd - 1 else 1)
    out_itemsize = jnp.dtype(out_dtype or x.dtype).itemsize
    bh, bc, need = conv_blocks(x.shape, w.shape, budget=budget, itemsize=itemsize, out_itemsize=out_itemsize,
                               epilogue=fused, whole=whole, unroll=unroll, row_align=row_align,
                               block_rows=block_rows, block_cout=block_cout)
    bh = min(bh, o1)
    n_r, grid_c = -(-o1 // bh), cout // bc
    padded = n_r * bh
    x_rows = bh + window[0] - 1
    if s == 1:  # the rows are the block's sublanes: a whole number of sublane tiles
        x_rows = -(-x_rows // 8) * 8
    if (n_r - 1) * bh + x_rows > x.shape[1]:  # a ragged last row block: zero rows under it, cut from the output
        x = jnp.pad(x, ((0, 0), (0, (n_r - 1) * bh + x_rows - x.shape[1]), *((0, 0),) * s))
    local = (bh, *out_spatial[1:])
    if not fused:
        out_block = (1, 1, *local, bc)
        out_shape = (batch, grid_c, padded, *out_spatial[1:], bc)
        o_index = lambda n, r, c: (n, c, r) + (0,) * s  # noqa: E731
        p_specs = [pl.BlockSpec((1, bc), lambda n, r, c: (0, c)) for _ in params]
        out_dt = out_dtype or x.dtype
    else:
        p_specs = [pl.BlockSpec(p.shape, functools.partial(lambda nd, n, r, c: (0,) * nd, p.ndim)) for p in params]
        if whole:
            t = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, *out_spatial, cout), jnp.float32), *params)
            full = t.shape[1:] if t.ndim > 1 else (1,)
            out_block, out_shape = (1, 1, *full), (batch, 1, *full)
            o_index = lambda n, r, c: (n,) + (0,) * (len(full) + 1)  # noqa: E731
        else:
            t = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, padded, *out_spatial[1:], cout), jnp.float32), *params)
            out_shape = (batch, 1, *t.shape[1:])
            out_block = (1, 1, *(bh if i == row_axis else d for i, d in enumerate(t.shape) if i))
            o_index = lambda n, r, c: (n, 0, *(r if i == row_axis else 0 for i in range(1, t.ndim)))  # noqa: E731
        out_dt = out_dtype or t.dtype
    # rows with their halo overlap: element offsets (Mosaic takes them on every axis of a block or on none)
    x_spec = pl.BlockSpec((pl.Element(1), pl.Element(x_rows), *(pl.Element(d) for d in x.shape[2:])),
                          lambda n, r, c: (n, r * bh) + (0,) * s)
    params_c = {}
    if need > budget:  # nothing smaller fits: ask for the VMEM this needs, up to the physical VMEM
        params_c["vmem_limit_bytes"] = int(min(max(scoped, need * 5 // 4 + (4 << 20)), physical * 15 // 16))
    result = pl.pallas_call(
        functools.partial(_conv_tpu_kernel, out_spatial=local, window=window, n_params=len(params),
                          epilogue=epilogue, precision=precision, unroll=unroll, whole=whole, n_rows=o1),
        grid=(batch, n_r, grid_c),
        in_specs=[x_spec, pl.BlockSpec((*window, cin, bc), lambda n, r, c: (0,) * (s + 1) + (c,)), *p_specs],
        out_specs=pl.BlockSpec(out_block, o_index),
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dt),
        scratch_shapes=[pltpu.VMEM(((padded if whole else bh), *out_spatial[1:], bc), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary") if whole else ("parallel",) * 3, **params_c),
    )(x, w, *params)
    if fused:
        if not whole and padded > o1:
            result = lax.slice_in_dim(result, 0, o1, axis=row_axis + 1)
        return result.reshape((batch, *tile_out.shape[1:]))
    if padded > o1:
        result = result[:, :, :o1]
    if grid_c == 1:
        return result.reshape((batch, *out_spatial, cout))
    # channel blocks were written side by side: (N, C/bc, *O, bc) -> (N, *O, C)
    return jnp.moveaxis(result, 1, -2).reshape((batch, *out_spatial, cout))
