"""Grouped gated MLP on TPU (Mosaic): ``act(x @ wg[g], x @ wu[g]) @ wd[g]`` for each row group g, fused.

The mixture-of-experts form of :mod:`mk.kernels.swiglu` over the row groups of
:mod:`mk.kernels.gmm.tpu` (rows sorted by expert, ``group_sizes`` experts'
row counts). The grid walks the same *visits* (group, row tile) from
``gmm_visits`` in scalar prefetch, times the blocks of hidden units: a step
multiplies the tile's rows by one hidden block of its group's gate and up
weights, applies the activation, zeroes the rows of other groups and adds that
block's down-projection into the tile's f32 accumulator (VMEM), which carries
across the visits of groups sharing the tile and is written after the last.
The (rows, hidden) activations never go to HBM.

Self-contained (jax only) but for ``gmm_visits`` and ``_block`` of
:mod:`mk.kernels.gmm.tpu`, copied before it; mk's offline author copies both
verbatim into the kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mk.kernels.gmm.tpu import _block, gmm_visits  # copied before this module in a written file


def _silu_gate(g, u):
    return jax.nn.sigmoid(g) * g * u


def _gmlp_tpu_kernel(group_ref, tile_ref, start_ref, end_ref, x_ref, wg_ref, wu_ref, wd_ref, o_ref, acc_ref, *,
                     block_m, nf, visits, activation, inter_dtype, precision):
    t, f = pl.program_id(0), pl.program_id(1)
    tile = tile_ref[t]
    prev = tile_ref[jnp.maximum(t - 1, 0)]
    nxt = tile_ref[jnp.minimum(t + 1, visits - 1)]

    @pl.when((f == 0) & ((t == 0) | (prev != tile)))
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    dims = (((1,), (0,)), ((), ()))
    x = x_ref[...]
    g = lax.dot_general(x, wg_ref[0], dims, precision=precision, preferred_element_type=jnp.float32)
    u = lax.dot_general(x, wu_ref[0], dims, precision=precision, preferred_element_type=jnp.float32)
    h = activation(g.astype(inter_dtype), u.astype(inter_dtype))
    rows = tile * block_m + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
    mine = (rows >= start_ref[t]) & (rows < end_ref[t])
    h = jnp.where(mine, h, jnp.zeros_like(h)).astype(wd_ref.dtype)
    acc_ref[...] += lax.dot_general(h, wd_ref[0], dims, precision=precision, preferred_element_type=jnp.float32)

    @pl.when((f == nf - 1) & ((t == visits - 1) | (nxt != tile)))
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def gmlp_tpu(x, wg, wu, wd, group_sizes, *, activation=None, inter_dtype=None, out_dtype=None, precision=None,
             block_m=128, block_f=256):
    """x (M, E) rows in group order; wg/wu (G, E, F); wd (G, F, D); group_sizes (G,) -> (M, D); rows past the
    groups' sum are zero. ``activation(g, u)`` (default ``silu(g) * u``) is elementwise."""
    (m, e), (g, e2, f), (g2, f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2 or g != g2 or group_sizes.shape != (g,):
        raise ValueError(f"expected x (M, E), wg/wu (G, E, F), wd (G, F, D), group_sizes (G,), got {x.shape=}, "
                         f"{wg.shape=}, {wu.shape=}, {wd.shape=}, {group_sizes.shape=}")
    sublanes = 8 * max(1, 4 // jnp.dtype(x.dtype).itemsize)
    bm, bf = _block(m, block_m, sublanes), _block(f, block_f, 128)
    group, tile, start, end = gmm_visits(group_sizes, m, bm)
    visits, nf = tile.shape[0], f // bf
    wsel = lambda t, grp: jnp.minimum(grp[t], g - 1)  # noqa: E731 (the pseudo group reads the last weights)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4,
        grid=(visits, nf),
        in_specs=[
            pl.BlockSpec((bm, e), lambda t, j, grp, til, s, en: (til[t], 0)),
            pl.BlockSpec((1, e, bf), lambda t, j, grp, til, s, en: (wsel(t, grp), 0, j)),
            pl.BlockSpec((1, e, bf), lambda t, j, grp, til, s, en: (wsel(t, grp), 0, j)),
            pl.BlockSpec((1, bf, d), lambda t, j, grp, til, s, en: (wsel(t, grp), j, 0)),
        ],
        out_specs=pl.BlockSpec((bm, d), lambda t, j, grp, til, s, en: (til[t], 0)),
        scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32)],
    )
    return pl.pallas_call(
        functools.partial(_gmlp_tpu_kernel, block_m=bm, nf=nf, visits=visits, activation=activation or _silu_gate,
                          inter_dtype=inter_dtype or x.dtype, precision=precision),
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((m, d), out_dtype or x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
    )(group, tile, start, end, x, wg, wu, wd)
