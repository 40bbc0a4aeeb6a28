"""Convolution as an implicit GEMM on GPU (Pallas Triton), with a fused epilogue.

The same computation as :mod:`mk.kernels.conv.tpu` (stride 1, VALID, channels
last, 1-3 spatial axes). Triton blocks are powers of two, so the input is
zero-padded: output spatial sizes to powers of two ``Op`` (the input to
``Op + K - 1``, again a power of two), channels to at least 16. One program
per sample (and output-channel block, without an epilogue) adds, for every
window offset, one (prod(Op), Cin) x (Cin, block_cout) ``tl.dot`` of a shifted
view of the sample into a register accumulator.

The epilogue sees the padded tile (1, *Op, Coutp): padded channels and pixels
hold finite values (bias and activations of zeros) that the caller's epilogue
must mask out of its reductions (mk's emitter does, with ``_masked``). The
``params`` are padded along the axes named in ``channel_axes`` (those that
follow Cout); the result is sliced back to the epilogue's output at the true
sizes.

With a fused epilogue a whole sample lives in registers (the epilogue may
reduce over it), so that suits the small and medium spatial sizes mk judges
at; large images need a spatial tiling with cross-program statistics (not
built). Without one (a bias at most) the output is tiled over its spatial
axes, the leading ones first (a 3-D output of (32, 64, 64) pixels becomes
tiles of (1, 16, 64)): each program computes one tile, chosen at trace time
(`_conv_tile`) so the f32 accumulator stays within registers and Triton's
block-element limit and its dot operands within ``smem_bytes`` (the chip's
shared-memory budget); output channels are split too when even the smallest
tile is too wide. Self-contained (jax only): mk's offline author copies
it verbatim into the kernels it writes.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _pad_axes(a, sizes):
    widths = [(0, t - n) for n, t in zip(a.shape, sizes)]
    return jnp.pad(a, widths) if any(w for _, w in widths) else a


def _pad_grouped(a, axis, groups, size, padded_groups):
    """a with its axis (groups of size) padded group by group: each group to a power of two, then to
    padded_groups groups, so the padded axis splits into (padded_groups, _pow2(size))."""
    shape = a.shape[:axis] + (groups, size) + a.shape[axis + 1:]
    widths = [(0, 0)] * axis + [(0, padded_groups - groups), (0, _pow2(size) - size)] + [(0, 0)] * (a.ndim - axis - 1)
    out = jnp.pad(a.reshape(shape), widths)
    return out.reshape(a.shape[:axis] + (padded_groups * _pow2(size),) + a.shape[axis + 1:])


def _conv_tile(out_spatial, cin_p, bc, *, itemsize, num_warps, smem_bytes):
    """(the output tile per program, output channels per program): the largest tile (powers of two, the leading
    spatial axes split first, down to one row of them before the next is split) whose f32 (prod(tile), bc)
    accumulator needs at most 64 registers a thread (a float32 dot at HIGHEST is an FMA sequence whose operands
    take registers too: at 128, 28k's tiles spilled on H100), and whose dot operands (the shifted input tile and the weight
    tile, twice for Triton's buffers) fit ``smem_bytes``; at least 16 accumulator rows (Triton's smallest dot); the
    channel block halved (not below 16) while even the smallest tile is too large."""
    least = min(16, math.prod(out_spatial))

    def fits(tile, c):
        rows = math.prod(tile)
        return rows * c <= 2048 * num_warps and 2 * (rows * cin_p + cin_p * c) * itemsize <= smem_bytes

    def shrink(tile, c):
        tile = list(tile)
        for a in range(len(tile)):
            while tile[a] > 1 and math.prod(tile) // 2 >= least and not fits(tile, c):
                tile[a] //= 2
        return tuple(tile)

    while bc > 16 and not fits(shrink(out_spatial, bc), bc):
        bc //= 2
    return shrink(out_spatial, bc), bc


def _tile_index(r, counts):
    """``r``'s coordinates in a row-major grid of ``counts`` (a program's tile, a window offset); 0 along axes of 1."""
    idx = []
    for n in reversed(counts):  # lax's C-style rem and div: r >= 0 here, and Triton lowers jnp's % and // badly
        idx.insert(0, 0 if n == 1 else lax.rem(r, n))
        r = r if n == 1 else lax.div(r, n)
    return tuple(idx)


def _conv_gpu_kernel(x_ref, w_ref, *refs, out_spatial, counts, window, n_params, epilogue, precision):
    p_refs, o_ref = refs[:n_params], refs[n_params]
    rows, cin = math.prod(out_spatial), x_ref.shape[-1]
    firsts = [i * n for i, n in zip(_tile_index(pl.program_id(2), counts), out_spatial)]  # this tile's first pixel

    def step(t, acc):  # one window offset: a loop, not unrolled (a float32 dot is a long FMA sequence on Triton)
        off = _tile_index(t, window)
        starts = tuple(f + o for f, o in zip(firsts, off))
        xs = x_ref[(0, *(pl.ds(o, n) for o, n in zip(starts, out_spatial)), slice(None))]
        return acc + lax.dot_general(xs.reshape(rows, cin), w_ref[off], (((1,), (0,)), ((), ())),
                                     precision=precision, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, math.prod(window), step, jnp.zeros((rows, w_ref.shape[-1]), jnp.float32))
    out = epilogue(acc.reshape((1, *out_spatial, acc.shape[-1])), *(p[...] for p in p_refs))
    o_ref[...] = out.reshape(o_ref.shape).astype(o_ref.dtype)


def _bias_epilogue(tile, bias):
    return tile + bias.reshape(bias.shape[-1:])


def conv_gpu(x, w, *params, epilogue=None, bias=None, channel_axes=None, channel_groups=None, out_dtype=None,
             precision=None, block_cout=None, num_warps=4, num_stages=1, smem_bytes=192 << 10):
    """``epilogue(conv(x, w) + bias, *params)`` per sample, channels last, on padded power-of-two blocks.

    ``channel_axes[i]``: the axes of ``params[i]`` whose size is Cout (padded with zeros like the channels);
    every other axis of a param must be a power of two. ``channel_groups=(groups, size)`` (with an epilogue,
    Cout = groups * size): the channels are padded group by group (each group to a power of two, then the number
    of groups), so the epilogue can split the padded channel axis into (-1, _pow2(size)); the epilogue's output
    must then have no channel axis. ``block_cout`` (a power of two) only applies without an epilogue; without one
    the rows and channels per program are fitted to registers and ``smem_bytes`` at trace time."""
    s = x.ndim - 2
    window, cin, cout = w.shape[:s], w.shape[s], w.shape[s + 1]
    if not 1 <= s <= 3 or w.ndim != s + 2 or x.shape[-1] != cin:
        raise ValueError(f"expected x (N, *S, Cin) and w (*K, Cin, Cout) with 1-3 spatial axes, got {x.shape=}, {w.shape=}")
    out_true = tuple(n - k + 1 for n, k in zip(x.shape[1:-1], window))
    if min(out_true) < 1:
        raise ValueError(f"the window {window} is larger than the input's spatial size {x.shape[1:-1]}")
    out_spatial = tuple(_pow2(o) for o in out_true)
    if math.prod(out_spatial) < 16:  # tl.dot needs at least 16 rows
        out_spatial = out_spatial[:-1] + (out_spatial[-1] * _pow2(-(-16 // math.prod(out_spatial))),)
    batch, cin_p, cout_p = x.shape[0], max(16, _pow2(cin)), max(16, _pow2(cout))
    x = _pad_axes(x, (batch, *(_pow2(o + k - 1) for o, k in zip(out_spatial, window)), cin_p))
    pad_channels = None
    if channel_groups is not None:
        groups, size = channel_groups
        if epilogue is None or groups * size != cout:
            raise ValueError(f"channel_groups={channel_groups} needs an epilogue and groups * size == Cout={cout}")
        padded_groups = max(_pow2(groups), -(-16 // _pow2(size)))  # at least 16 channels (Triton's smallest dot)
        cout_p = padded_groups * _pow2(size)
        pad_channels = functools.partial(_pad_grouped, groups=groups, size=size, padded_groups=padded_groups)
        w = pad_channels(_pad_axes(w, (*window, cin_p, cout)), s + 1)
    w = _pad_axes(w, (*window, cin_p, cout_p))
    if epilogue is None:
        bc = min(cout_p, _pow2(block_cout or cout_p))
        if bc < 16:
            raise ValueError(f"block_cout={block_cout} must be at least 16 (Triton's smallest dot)")
        tiled, bc = _conv_tile(out_spatial, cin_p, bc, itemsize=x.dtype.itemsize, num_warps=num_warps,
                               smem_bytes=smem_bytes)
        if bias is not None:
            params, epilogue = (_pad_axes(bias.reshape(1, cout), (1, cout_p)),), _bias_epilogue
        else:
            params, epilogue = (), lambda tile: tile
        true = jax.ShapeDtypeStruct((1, *out_true, cout), x.dtype)
        padded = jax.ShapeDtypeStruct((1, *tiled, bc), x.dtype)
        p_specs = [pl.BlockSpec((1, bc), lambda n, c, r: (0, c)) for _ in params]
        grid_c = cout_p // bc
    else:
        if bias is not None:
            raise ValueError("pass the bias to the epilogue as one of its params")
        channel_axes = channel_axes or [()] * len(params)
        true = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, *out_true, cout), jnp.float32), *params) \
            if pad_channels is None else None
        if pad_channels is not None:
            params = tuple(functools.reduce(pad_channels, axes, p) for p, axes in zip(params, channel_axes))
        params = tuple(_pad_axes(p, [cout_p if a in axes else _pow2(n) for a, n in enumerate(p.shape)])
                       for p, axes in zip(params, channel_axes))
        if true is None:  # the epilogue splits padded channels only, and its output has no channel axis
            true = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, *out_true, cout_p), jnp.float32), *params)
        padded = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, *out_spatial, cout_p), jnp.float32), *params)
        p_specs = [pl.BlockSpec(p.shape, functools.partial(lambda nd, n, c, r: (0,) * nd, p.ndim)) for p in params]
        bc, grid_c, tiled = cout_p, 1, out_spatial
    counts = tuple(o // t for o, t in zip(out_spatial, tiled))
    grid_r = math.prod(counts)
    out_block = (1, 1, *padded.shape[1:])
    if grid_r > 1:  # pixels tiled (only without a fused epilogue): the output (N, C/bc, *Op, bc)
        out_spec = pl.BlockSpec(out_block, lambda n, c, r: (n, c, *_tile_index(r, counts), 0))
    else:
        out_spec = pl.BlockSpec(out_block, lambda n, c, r: (n, c) + (0,) * (len(out_block) - 2))
    result = pl.pallas_call(
        functools.partial(_conv_gpu_kernel, out_spatial=tiled, counts=counts, window=window, n_params=len(params),
                          epilogue=epilogue, precision=precision),
        grid=(batch, grid_c, grid_r),
        in_specs=[pl.BlockSpec((1, *x.shape[1:]), lambda n, c, r: (n,) + (0,) * (s + 1)),
                  pl.BlockSpec((*window, cin_p, bc), lambda n, c, r: (0,) * (s + 1) + (c,)), *p_specs],
        out_specs=out_spec,
        out_shape=jax.ShapeDtypeStruct((batch, grid_c, *out_spatial, bc) if grid_r > 1 else
                                       (batch, grid_c, *padded.shape[1:]), out_dtype or padded.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(x, w, *params)
    if grid_c > 1 or grid_r > 1:  # channel blocks side by side: (N, C/bc, *Op, bc) -> (N, *Op, Cp)
        result = jnp.moveaxis(result, 1, -2).reshape((batch, *out_spatial, grid_c * bc))
    else:
        result = result.reshape((batch, *padded.shape[1:]))
    return result[(slice(None), *(slice(0, n) for n in true.shape[1:]))]
