"""Convolution as an implicit GEMM on TPU (Mosaic), with a fused epilogue.

Stride-1, undilated, ungrouped convolution of a channels-last input ``x``
(N, *S, Cin) with a window ``w`` (*K, Cin, Cout), 1 to 3 spatial axes, VALID
(pad the input first for other paddings). The grid runs over samples and
output-channel blocks; each program keeps its sample in VMEM, and for every
output row (all output spatial axes but the last, flattened) adds one
(Wo, Cin) x (Cin, block_cout) MXU product per window offset into an f32 VMEM
tile. No patch matrix is ever built: the window offsets are static slices of
the sample already in VMEM.

The finished (1, *O, block_cout) tile goes through ``epilogue(tile, *params)``
before it is written, so work after the convolution (bias, activations, norms
over the sample, pooling, channel reductions) never round-trips to HBM. With an
epilogue a program holds all output channels (``block_cout`` = Cout) and the
epilogue may reduce over any axis but the batch; ``params`` (small arrays:
biases, norm weights) reach every program whole.

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


def _conv_tpu_kernel(x_ref, w_ref, *refs, out_spatial, window, n_params, epilogue, precision, unroll):
    p_refs, o_ref, acc_ref = refs[:n_params], refs[n_params], refs[n_params + 1]
    lead, wo = out_spatial[:-1], out_spatial[-1]

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
        acc_ref[tuple(idx) if idx else ...] = acc
        return carry

    lax.fori_loop(0, math.prod(lead), row, 0, unroll=max(1, min(unroll, math.prod(lead))))
    tile = acc_ref[...][None]
    out = epilogue(tile, *(p[...] for p in p_refs))
    o_ref[...] = out.reshape(o_ref.shape).astype(o_ref.dtype)


def _bias_epilogue(tile, bias):
    return tile + bias.reshape(bias.shape[-1:])


def conv_tpu(x, w, *params, epilogue=None, bias=None, out_dtype=None, precision=None, block_cout=None, unroll=1):
    """``epilogue(conv(x, w) + bias)`` per sample, channels last. ``block_cout`` (a multiple of 128 dividing Cout,
    or None for all channels) only applies without an epilogue; ``unroll``: output rows per loop step."""
    s = x.ndim - 2
    window, cin, cout = w.shape[:s], w.shape[s], w.shape[s + 1]
    if not 1 <= s <= 3 or w.ndim != s + 2 or x.shape[-1] != cin:
        raise ValueError(f"expected x (N, *S, Cin) and w (*K, Cin, Cout) with 1-3 spatial axes, got {x.shape=}, {w.shape=}")
    out_spatial = tuple(n - k + 1 for n, k in zip(x.shape[1:-1], window))
    if min(out_spatial) < 1:
        raise ValueError(f"the window {window} is larger than the input's spatial size {x.shape[1:-1]}")
    batch = x.shape[0]
    if epilogue is None:
        bc = cout if block_cout is None else block_cout
        if cout % bc or (bc != cout and bc % 128):
            raise ValueError(f"block_cout={bc} must divide Cout={cout} and be a multiple of 128 (or Cout)")
        if bias is not None:
            params, epilogue = (bias.reshape(1, cout),), _bias_epilogue
        else:
            params, epilogue = (), lambda tile: tile
        tile_out = jax.ShapeDtypeStruct((1, *out_spatial, bc), x.dtype)
        out_block, grid_c = (1, 1, *out_spatial, bc), cout // bc
        p_specs = [pl.BlockSpec((1, bc), lambda n, c: (0, c)) for _ in params]
    else:
        if bias is not None:
            raise ValueError("pass the bias to the epilogue as one of its params")
        bc, grid_c = cout, 1
        tile_out = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((1, *out_spatial, cout), jnp.float32), *params)
        out_block = (1, 1, *tile_out.shape[1:], *((1,) if tile_out.ndim == 1 else ()))
        p_specs = [pl.BlockSpec(p.shape, functools.partial(lambda nd, n, c: (0,) * nd, p.ndim)) for p in params]
    out_shape = (batch, grid_c, *out_block[2:])
    rank_out = len(out_shape)
    result = pl.pallas_call(
        functools.partial(_conv_tpu_kernel, out_spatial=out_spatial, window=window, n_params=len(params),
                          epilogue=epilogue, precision=precision, unroll=unroll),
        grid=(batch, grid_c),
        in_specs=[pl.BlockSpec((1, *x.shape[1:]), lambda n, c: (n,) + (0,) * (s + 1)),
                  pl.BlockSpec((*window, cin, bc), lambda n, c: (0,) * (s + 1) + (c,)), *p_specs],
        out_specs=pl.BlockSpec(out_block, lambda n, c: (n, c) + (0,) * (rank_out - 2)),
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype or tile_out.dtype),
        scratch_shapes=[pltpu.VMEM((*out_spatial, bc), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x, w, *params)
    if grid_c == 1:
        return result.reshape((batch, *tile_out.shape[1:]))
    # channel blocks were written side by side: (N, C/bc, *O, bc) -> (N, *O, C)
    return jnp.moveaxis(result, 1, -2).reshape((batch, *out_spatial, cout))
