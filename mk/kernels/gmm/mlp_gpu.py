"""Grouped gated MLP on GPU (Pallas Triton): ``act(x @ wg[g], x @ wu[g]) @ wd[g]`` per row group g, fused.

The same computation as :mod:`mk.kernels.gmm.mlp_tpu`. One program per (row
tile, output-column block) reads the first and last group touching its tile
(``gmm_tiles`` of :mod:`mk.kernels.gmm.gpu`, copied before it), loops over those
groups and over hidden blocks: gate and up products of its rows (accumulated
over ``block_e``-wide blocks of E), the activation (in f32: Triton lowers no 16-bit division; the products are first
rounded to ``inter_dtype`` as the reference's are), rows of other groups and
padded hidden units zeroed, and the block's down-projection accumulated in
registers; written once. Sizes are zero-padded to power-of-two blocks. Block
sizes are requests, halved at trace time (``_gmlp_fit``) until the dot operands'
buffers fit ``smem_bytes`` of shared memory (the chip's budget) and the f32
accumulators fit registers.

Self-contained (jax only) but for ``gmm_tiles``, ``_gmlp_fit``, ``_fit`` and
``_pow2``; mk's offline author copies them verbatim into the kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from mk.kernels.gmm.gpu import _fit, _gmlp_fit, _pow2, gmm_tiles  # copied before this module in a written file


def _silu_gate_f32(g, u):
    return jax.nn.sigmoid(g) * g * u


def _gmlp_gpu_kernel(first_ref, last_ref, start_ref, end_ref, x_ref, wg_ref, wu_ref, wd_ref, o_ref, *, block_m,
                     block_e, ne, block_f, nf, hidden, num_groups, activation, inter_dtype, precision):
    i = pl.program_id(0)
    rows = i * block_m + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
    dims = (((1,), (0,)), ((), ()))
    zeros = jnp.zeros((block_m, block_f), jnp.float32)

    def group(gi, acc):
        mine = (rows >= start_ref[gi]) & (rows < end_ref[gi])
        wg_i = jnp.minimum(gi, num_groups - 1)

        def step(j, acc):
            cols = pl.ds(j * block_f, block_f)

            def k_step(k, gu):
                ks = pl.ds(k * block_e, block_e)
                x = x_ref[:, ks]
                g = gu[0] + lax.dot_general(x, wg_ref[wg_i, ks, cols], dims, precision=precision,
                                            preferred_element_type=jnp.float32)
                u = gu[1] + lax.dot_general(x, wu_ref[wg_i, ks, cols], dims, precision=precision,
                                            preferred_element_type=jnp.float32)
                return g, u

            g, u = lax.fori_loop(0, ne, k_step, (zeros, zeros))
            h = activation(g.astype(inter_dtype).astype(jnp.float32), u.astype(inter_dtype).astype(jnp.float32))
            live = mine & (j * block_f + lax.broadcasted_iota(jnp.int32, h.shape, 1) < hidden)
            h = jnp.where(live, h, jnp.zeros_like(h)).astype(wd_ref.dtype)
            return acc + lax.dot_general(h, wd_ref[wg_i, cols, :], dims, precision=precision,
                                         preferred_element_type=jnp.float32)

        return lax.fori_loop(0, nf, step, acc)

    acc = jnp.zeros(o_ref.shape, jnp.float32)
    acc = lax.fori_loop(first_ref[i], jnp.minimum(last_ref[i], num_groups - 1) + 1, group, acc)
    o_ref[...] = acc.astype(o_ref.dtype)


def gmlp_gpu(x, wg, wu, wd, group_sizes, *, activation=None, inter_dtype=None, out_dtype=None, precision=None,
             block_m=64, block_f=64, block_n=128, block_e=64, num_warps=4, num_stages=2, smem_bytes=192 << 10):
    """x (M, E) rows in group order; wg/wu (G, E, F); wd (G, F, D); group_sizes (G,) -> (M, D), as
    :func:`gmlp_tpu`, on padded power-of-two blocks fitted to ``smem_bytes``. ``activation`` runs in f32."""
    (m, e), (g, e2, f), (g2, f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2 or g != g2 or group_sizes.shape != (g,):
        raise ValueError(f"expected x (M, E), wg/wu (G, E, F), wd (G, F, D), group_sizes (G,), got {x.shape=}, "
                         f"{wg.shape=}, {wu.shape=}, {wd.shape=}, {group_sizes.shape=}")
    itemsize = max(jnp.dtype(a.dtype).itemsize for a in (x, wg, wu, wd))
    bm, be, bf, bn = _gmlp_fit(_fit(m, block_m)[0], _fit(e, block_e)[0], _fit(f, block_f)[0], _fit(d, block_n)[0],
                               itemsize=itemsize, num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes)
    (bm, m_pad), (be, e_pad), (bf, f_pad), (bn, d_pad) = _fit(m, bm), _fit(e, be), _fit(f, bf), _fit(d, bn)
    x = jnp.pad(x, ((0, m_pad - m), (0, e_pad - e)))
    wg = jnp.pad(wg, ((0, 0), (0, e_pad - e), (0, f_pad - f)))
    wu = jnp.pad(wu, ((0, 0), (0, e_pad - e), (0, f_pad - f)))
    wd = jnp.pad(wd, ((0, 0), (0, f_pad - f), (0, d_pad - d)))
    first, last, starts, ends = gmm_tiles(group_sizes, m_pad, bm)
    whole = lambda a: pl.BlockSpec(a.shape, lambda i, j: (0,) * a.ndim)  # noqa: E731
    out = pl.pallas_call(
        functools.partial(_gmlp_gpu_kernel, block_m=bm, block_e=be, ne=e_pad // be, block_f=bf, nf=f_pad // bf, hidden=f, num_groups=g,
                          activation=activation or _silu_gate_f32, inter_dtype=inter_dtype or x.dtype,
                          precision=precision),
        grid=(m_pad // bm, d_pad // bn),
        in_specs=[whole(first), whole(last), whole(starts), whole(ends),
                  pl.BlockSpec((bm, e_pad), lambda i, j: (i, 0)),
                  pl.BlockSpec((g, e_pad, f_pad), lambda i, j: (0, 0, 0)),
                  pl.BlockSpec((g, e_pad, f_pad), lambda i, j: (0, 0, 0)),
                  pl.BlockSpec((g, f_pad, bn), lambda i, j: (0, 0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m_pad, d_pad), out_dtype or x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(first, last, starts, ends, x, wg, wu, wd)
    return out[:m, :d]
