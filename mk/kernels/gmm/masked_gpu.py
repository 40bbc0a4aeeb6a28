"""Routed gated MLP on GPU (Pallas Triton) without sorting: the same computation as :mod:`mk.kernels.gmm.masked_tpu`.

One program per (token tile, output-column block) loops over the experts and, for an expert some token of its
tile chose (``chosen``, from the combine weights in plain JAX; ``lax.cond`` skips the others), over hidden
blocks: gate and up products (accumulated over ``block_e``-wide blocks of E), the activation (in f32 on values rounded to ``inter_dtype``: Triton lowers no
16-bit division), padded hidden units zeroed, the down-projection accumulated in registers, rounded to
``down_dtype`` and added times the tile's weight column. Sizes are zero-padded to power-of-two blocks. Block sizes
are requests, halved at trace time (``_gmlp_fit``) until the dot operands' buffers fit ``smem_bytes`` of shared
memory (the chip's budget) and the f32 accumulators fit registers.

Self-contained (jax only) but for ``_gmlp_fit``, ``_fit`` and ``_pow2`` of :mod:`mk.kernels.gmm.gpu`, copied before
it.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from mk.kernels.gmm.gpu import _fit, _gmlp_fit, _pow2  # copied before this module in a written file


def _silu_gate_mf32(g, u):
    return jax.nn.sigmoid(g) * g * u


def _masked_gpu_kernel(chosen_ref, x_ref, wg_ref, wu_ref, wd_ref, w_ref, o_ref, *, n_experts, block_e, ne, block_f,
                       nf, hidden, activation, inter_dtype, down_dtype, precision):
    i = pl.program_id(0)
    dims = (((1,), (0,)), ((), ()))
    zeros = jnp.zeros((x_ref.shape[0], block_f), jnp.float32)
    w = w_ref[...]
    col = lax.broadcasted_iota(jnp.int32, w.shape, 1)

    def expert(n, out):
        def run(out):
            def step(j, acc):
                cols = pl.ds(j * block_f, block_f)

                def k_step(k, gu):
                    ks = pl.ds(k * block_e, block_e)
                    x = x_ref[:, ks]
                    g = gu[0] + lax.dot_general(x, wg_ref[n, ks, cols], dims, precision=precision,
                                                preferred_element_type=jnp.float32)
                    u = gu[1] + lax.dot_general(x, wu_ref[n, ks, cols], dims, precision=precision,
                                                preferred_element_type=jnp.float32)
                    return g, u

                g, u = lax.fori_loop(0, ne, k_step, (zeros, zeros))
                h = activation(g.astype(inter_dtype).astype(jnp.float32), u.astype(inter_dtype).astype(jnp.float32))
                live = j * block_f + lax.broadcasted_iota(jnp.int32, h.shape, 1) < hidden
                h = jnp.where(live, h, jnp.zeros_like(h)).astype(wd_ref.dtype)
                return acc + lax.dot_general(h, wd_ref[n, cols, :], dims, precision=precision,
                                             preferred_element_type=jnp.float32)

            y = lax.fori_loop(0, nf, step, jnp.zeros(out.shape, jnp.float32))
            wn = jnp.sum(jnp.where(col == n, w, jnp.zeros_like(w)), axis=1).astype(jnp.float32)
            return out + y.astype(down_dtype).astype(jnp.float32) * wn[:, None]

        return lax.cond(chosen_ref[i, n] > 0, run, lambda o: o, out)

    out = lax.fori_loop(0, n_experts, expert, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = out.astype(o_ref.dtype)


def masked_mlp_gpu(x, wg, wu, wd, w, *, activation=None, inter_dtype=None, down_dtype=None, out_dtype=None,
                   precision=None, block_m=64, block_f=64, block_n=128, block_e=64, num_warps=4, num_stages=2,
                   smem_bytes=192 << 10):
    """x (T, E); wg/wu (N, E, F); wd (N, F, D); w (T, N) combine weights -> (T, D), as :func:`masked_mlp_tpu`, on
    padded power-of-two blocks fitted to ``smem_bytes``."""
    (t, e), (n, e2, f), (n2, f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2 or n != n2 or w.shape != (t, n):
        raise ValueError(f"expected x (T, E), wg/wu (N, E, F), wd (N, F, D), w (T, N), got {x.shape=}, {wg.shape=}, "
                         f"{wu.shape=}, {wd.shape=}, {w.shape=}")
    itemsize = max(jnp.dtype(a.dtype).itemsize for a in (x, wg, wu, wd))
    bm, be, bf, bn = _gmlp_fit(_fit(t, block_m)[0], _fit(e, block_e)[0], _fit(f, block_f)[0], _fit(d, block_n)[0],
                               itemsize=itemsize, num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes)
    (bm, t_pad), (be, e_pad), (bf, f_pad), (bn, d_pad) = _fit(t, bm), _fit(e, be), _fit(f, bf), _fit(d, bn)
    n_pad = max(16, _pow2(n))
    x = jnp.pad(x, ((0, t_pad - t), (0, e_pad - e)))
    wg = jnp.pad(wg, ((0, 0), (0, e_pad - e), (0, f_pad - f)))
    wu = jnp.pad(wu, ((0, 0), (0, e_pad - e), (0, f_pad - f)))
    wd = jnp.pad(wd, ((0, 0), (0, f_pad - f), (0, d_pad - d)))
    w = jnp.pad(w, ((0, t_pad - t), (0, n_pad - n)))
    tiles = t_pad // bm
    chosen = jnp.any(w.reshape(tiles, bm, n_pad) != 0, axis=1).astype(jnp.int32)
    chosen = jnp.pad(chosen, ((0, _pow2(tiles) - tiles), (0, 0)))
    out = pl.pallas_call(
        functools.partial(_masked_gpu_kernel, n_experts=n, block_e=be, ne=e_pad // be, block_f=bf, nf=f_pad // bf, hidden=f,
                          activation=activation or _silu_gate_mf32, inter_dtype=inter_dtype or x.dtype,
                          down_dtype=down_dtype or x.dtype, precision=precision),
        grid=(tiles, d_pad // bn),
        in_specs=[pl.BlockSpec(chosen.shape, lambda i, j: (0, 0)),
                  pl.BlockSpec((bm, e_pad), lambda i, j: (i, 0)),
                  pl.BlockSpec((n, e_pad, f_pad), lambda i, j: (0, 0, 0)),
                  pl.BlockSpec((n, e_pad, f_pad), lambda i, j: (0, 0, 0)),
                  pl.BlockSpec((n, f_pad, bn), lambda i, j: (0, 0, j)),
                  pl.BlockSpec((bm, n_pad), lambda i, j: (i, 0))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((t_pad, d_pad), out_dtype or jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(chosen, x, wg, wu, wd, w)
    return out[:t, :d]
