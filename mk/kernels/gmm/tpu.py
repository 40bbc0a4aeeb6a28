"""Grouped matmul (megablox-style) on TPU (Mosaic), group offsets in scalar prefetch.

``lhs`` (M, K) holds G groups of consecutive rows (``group_sizes``, from row
0; rows past their sum are zero in the output; a sum past M is clipped to M); group g's rows are multiplied
by ``rhs[g]`` (K, N). The grid's middle axis walks *visits*: each (group, row
tile) pair where a group touches a tile, in row order, so a tile that two
groups share is visited twice in a row and its f32 accumulator (VMEM) carries
over; a visit masks the rows of other groups out of its lhs block. The visit
table (group id and row tile per visit) and the group bounds are computed from
``group_sizes`` in plain JAX and reach the kernel as scalar-prefetch operands
(SMEM), where the BlockSpec index maps read them. There are at most
``M / block_m + G`` visits: the grid has that many, and the spare ones repeat
the last tile with an empty row range.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def gmm_visits(group_sizes, m, block_m):
    """(group id, row tile, row start, row end) per visit, each (m // block_m + G + 1,) int32. A pseudo group G
    covers the rows past ``sum(group_sizes)``, so every tile is visited and written (with zeros there)."""
    sizes = jnp.concatenate([group_sizes.astype(jnp.int32), jnp.zeros((1,), jnp.int32)])
    ends = jnp.minimum(jnp.cumsum(sizes), m).at[-1].set(m)  # rows past M are absent: groups are clipped to it
    starts = jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])
    sizes = ends - starts
    first, last = starts // block_m, (ends - 1) // block_m
    counts = jnp.where(sizes > 0, last - first + 1, 0)
    done = jnp.cumsum(counts)
    visits = m // block_m + sizes.shape[0]
    t = jnp.arange(visits, dtype=jnp.int32)
    group = jnp.minimum(jnp.searchsorted(done, t, side="right"), sizes.shape[0] - 1).astype(jnp.int32)
    spare = t >= done[-1]
    tile = jnp.where(spare, m // block_m - 1, first[group] + t - (done[group] - counts[group])).astype(jnp.int32)
    empty = spare | (group == sizes.shape[0] - 1)  # spare visits and the pseudo group multiply no row
    row_start = jnp.where(empty, 0, starts[group]).astype(jnp.int32)
    row_end = jnp.where(empty, 0, ends[group]).astype(jnp.int32)
    return group, tile, row_start, row_end


def _gmm_tpu_kernel(group_ref, tile_ref, start_ref, end_ref, x_ref, w_ref, o_ref, acc_ref, *, block_m, nk, visits,
                    precision):
    t, k = pl.program_id(1), pl.program_id(2)
    tile = tile_ref[t]
    prev = tile_ref[jnp.maximum(t - 1, 0)]
    nxt = tile_ref[jnp.minimum(t + 1, visits - 1)]

    @pl.when((k == 0) & ((t == 0) | (prev != tile)))
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    rows = tile * block_m + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
    mine = (rows >= start_ref[t]) & (rows < end_ref[t])
    x = jnp.where(mine, x_ref[...], jnp.zeros_like(x_ref))
    acc_ref[...] += lax.dot_general(x, w_ref[0], (((1,), (0,)), ((), ())), precision=precision,
                                    preferred_element_type=jnp.float32)

    @pl.when((k == nk - 1) & ((t == visits - 1) | (nxt != tile)))
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _block(n, want, quantum):
    """The largest multiple of quantum dividing n and at most want; n itself when none does."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def gmm_tpu(lhs, rhs, group_sizes, *, out_dtype=None, precision=None, block_m=128, block_n=128, block_k=128):
    """``lhs`` (M, K), ``rhs`` (G, K, N), ``group_sizes`` (G,) int32 -> (M, N). Block sizes are requests, fitted
    to the sizes (the largest legal block dividing each, at most the request)."""
    (m, k), (g, k2, n) = lhs.shape, rhs.shape
    if k != k2 or group_sizes.shape != (g,):
        raise ValueError(f"expected lhs (M, K), rhs (G, K, N), group_sizes (G,), got {lhs.shape=}, {rhs.shape=}, "
                         f"{group_sizes.shape=}")
    sublanes = 8 * max(1, 4 // jnp.dtype(lhs.dtype).itemsize)
    bm, bn, bk = _block(m, block_m, sublanes), _block(n, block_n, 128), _block(k, block_k, 128)
    group, tile, start, end = gmm_visits(group_sizes, m, bm)
    visits, nk = tile.shape[0], k // bk
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4,
        grid=(n // bn, visits, nk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda j, t, kk, grp, til, s, e: (til[t], kk)),
            pl.BlockSpec((1, bk, bn), lambda j, t, kk, grp, til, s, e: (jnp.minimum(grp[t], g - 1), kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda j, t, kk, grp, til, s, e: (til[t], j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )
    return pl.pallas_call(
        functools.partial(_gmm_tpu_kernel, block_m=bm, nk=nk, visits=visits, precision=precision),
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype or lhs.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(group, tile, start, end, lhs, rhs)
