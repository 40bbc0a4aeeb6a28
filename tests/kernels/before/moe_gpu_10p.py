# The moe-gpu kernel mk's offline author wrote for jaxbench:10p_Sparse_MoE before eeaf0fc (whole (E, F) gate and up
# operands as dot operands: 2.6 MB of shared memory at full). Kept to show the judge refuses it for H100 at full.
"""mk offline author: sparse mixture of experts for 10p_Sparse_MoE (target gpu).

The reference computes every expert for every token and weights the unselected ones by 0; this kernel computes
only each token's top-k choices: the router (the reference's own ops, plain JAX) gives the combine weights and
the choices, the choices are sorted by expert (argsort, bincount for the group sizes), the gate and up
products, the reference's gate (_act) and the down product run fused in one grouped kernel over the sorted
rows (mk/kernels/gmm/mlp_gpu.py with the visit tables of mk/kernels/gmm/gpu.py, both copied below unchanged),
and each token's rows are combined with their weights.
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

CONFIG_SPACE = {'block_m': [32, 64], 'block_f': [32, 64], 'block_n': [64, 128], 'num_warps': [4, 8]}

# --- mk/kernels/gmm/gpu.py -----------------------------------------------------------------------
def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _fit(n, want):
    """(block, padded n): a power-of-two block >= 16 and at most want, n padded to a multiple of it."""
    b = max(16, min(_pow2(want), _pow2(n)))
    return b, -(-n // b) * b


def gmm_tiles(group_sizes, m_pad, block_m):
    """(first group, last group) per row tile and the groups' (start, end) rows, padded to powers of two; the
    pseudo group G holds the rows past ``sum(group_sizes)`` and multiplies none of them."""
    g = group_sizes.shape[0]
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    starts = ends - group_sizes.astype(jnp.int32)
    bounds = jnp.concatenate([ends, jnp.full((1,), m_pad, jnp.int32)])
    first_row = jnp.arange(0, m_pad, block_m, dtype=jnp.int32)
    first = jnp.minimum(jnp.searchsorted(bounds, first_row, side="right"), g).astype(jnp.int32)
    last = jnp.minimum(jnp.searchsorted(bounds, first_row + block_m - 1, side="right"), g).astype(jnp.int32)
    pad = _pow2(g + 1) - g
    starts = jnp.concatenate([starts, jnp.zeros((pad,), jnp.int32)])
    ends = jnp.concatenate([ends, jnp.zeros((pad,), jnp.int32)])
    tiles = _pow2(first.shape[0])
    first = jnp.concatenate([first, jnp.full((tiles - first.shape[0],), g, jnp.int32)])
    last = jnp.concatenate([last, jnp.full((tiles - last.shape[0],), g - 1, jnp.int32)])
    return first, last, starts, ends


def _gmm_gpu_kernel(first_ref, last_ref, start_ref, end_ref, x_ref, w_ref, o_ref, *, block_m, block_k, nk,
                    num_groups, precision):
    i = pl.program_id(0)
    rows = i * block_m + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)

    def group(g, acc):
        mine = (rows >= start_ref[g]) & (rows < end_ref[g])
        wg = jnp.minimum(g, num_groups - 1)

        def step(kk, acc):
            x = x_ref[:, pl.ds(kk * block_k, block_k)]
            x = jnp.where(mine, x, jnp.zeros_like(x))
            w = w_ref[wg, pl.ds(kk * block_k, block_k), :]
            return acc + lax.dot_general(x, w, (((1,), (0,)), ((), ())), precision=precision,
                                         preferred_element_type=jnp.float32)

        return lax.fori_loop(0, nk, step, acc)

    acc = jnp.zeros(o_ref.shape, jnp.float32)
    acc = lax.fori_loop(first_ref[i], jnp.minimum(last_ref[i], num_groups - 1) + 1, group, acc)
    o_ref[...] = acc.astype(o_ref.dtype)


def gmm_gpu(lhs, rhs, group_sizes, *, out_dtype=None, precision=None, block_m=64, block_n=64, block_k=32,
            num_warps=4, num_stages=2):
    """``lhs`` (M, K), ``rhs`` (G, K, N), ``group_sizes`` (G,) int32 -> (M, N), on padded power-of-two blocks."""
    (m, k), (g, k2, n) = lhs.shape, rhs.shape
    if k != k2 or group_sizes.shape != (g,):
        raise ValueError(f"expected lhs (M, K), rhs (G, K, N), group_sizes (G,), got {lhs.shape=}, {rhs.shape=}, "
                         f"{group_sizes.shape=}")
    (bm, m_pad), (bn, n_pad), (bk, k_pad) = _fit(m, block_m), _fit(n, block_n), _fit(k, block_k)
    x = jnp.pad(lhs, ((0, m_pad - m), (0, k_pad - k)))
    w = jnp.pad(rhs, ((0, 0), (0, k_pad - k), (0, n_pad - n)))
    first, last, starts, ends = gmm_tiles(group_sizes, m_pad, bm)
    whole = lambda a: pl.BlockSpec(a.shape, lambda i, j: (0,) * a.ndim)  # noqa: E731
    out = pl.pallas_call(
        functools.partial(_gmm_gpu_kernel, block_m=bm, block_k=bk, nk=k_pad // bk, num_groups=g, precision=precision),
        grid=(m_pad // bm, n_pad // bn),
        in_specs=[whole(first), whole(last), whole(starts), whole(ends),
                  pl.BlockSpec((bm, k_pad), lambda i, j: (i, 0)),
                  pl.BlockSpec((g, k_pad, bn), lambda i, j: (0, 0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m_pad, n_pad), out_dtype or lhs.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(first, last, starts, ends, x, w)
    return out[:m, :n]
# ----------------------------------------------------------------------------------------------------


# --- mk/kernels/gmm/mlp_gpu.py -------------------------------------------------------------------
def _silu_gate_f32(g, u):
    return jax.nn.sigmoid(g) * g * u


def _gmlp_gpu_kernel(first_ref, last_ref, start_ref, end_ref, x_ref, wg_ref, wu_ref, wd_ref, o_ref, *, block_m,
                     block_f, nf, hidden, num_groups, activation, inter_dtype, precision):
    i = pl.program_id(0)
    rows = i * block_m + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
    dims = (((1,), (0,)), ((), ()))
    x = x_ref[...]

    def group(gi, acc):
        mine = (rows >= start_ref[gi]) & (rows < end_ref[gi])
        wg_i = jnp.minimum(gi, num_groups - 1)

        def step(j, acc):
            cols = pl.ds(j * block_f, block_f)
            g = lax.dot_general(x, wg_ref[wg_i, :, cols], dims, precision=precision, preferred_element_type=jnp.float32)
            u = lax.dot_general(x, wu_ref[wg_i, :, cols], dims, precision=precision, preferred_element_type=jnp.float32)
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
             block_m=64, block_f=64, block_n=128, num_warps=4, num_stages=2):
    """x (M, E) rows in group order; wg/wu (G, E, F); wd (G, F, D); group_sizes (G,) -> (M, D), as
    :func:`gmlp_tpu`, on padded power-of-two blocks. ``activation`` runs in f32."""
    (m, e), (g, e2, f), (g2, f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2 or g != g2 or group_sizes.shape != (g,):
        raise ValueError(f"expected x (M, E), wg/wu (G, E, F), wd (G, F, D), group_sizes (G,), got {x.shape=}, "
                         f"{wg.shape=}, {wu.shape=}, {wd.shape=}, {group_sizes.shape=}")
    (bm, m_pad), (bf, f_pad), (bn, d_pad) = _fit(m, block_m), _fit(f, block_f), _fit(d, block_n)
    e_pad = max(16, _pow2(e))
    x = jnp.pad(x, ((0, m_pad - m), (0, e_pad - e)))
    wg = jnp.pad(wg, ((0, 0), (0, e_pad - e), (0, f_pad - f)))
    wu = jnp.pad(wu, ((0, 0), (0, e_pad - e), (0, f_pad - f)))
    wd = jnp.pad(wd, ((0, 0), (0, f_pad - f), (0, d_pad - d)))
    first, last, starts, ends = gmm_tiles(group_sizes, m_pad, bm)
    whole = lambda a: pl.BlockSpec(a.shape, lambda i, j: (0,) * a.ndim)  # noqa: E731
    out = pl.pallas_call(
        functools.partial(_gmlp_gpu_kernel, block_m=bm, block_f=bf, nf=f_pad // bf, hidden=f, num_groups=g,
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
# ----------------------------------------------------------------------------------------------------


def _moe(x, combine, choice, wg, wu, wd, *, act, inter_dtype, down_dtype, out_dtype, precision, **config):
    """sum over each token's k choices of combine[t, n] * act(x_t @ wg[n], x_t @ wu[n]) @ wd[n], n the choice: the
    choices sorted by expert, the three products fused in one grouped kernel. x (tokens..., E); combine (tokens...,
    N); choice (tokens..., k); wg/wu (N, E, M); wd (N, M, E')."""
    lead, e = x.shape[:-1], x.shape[-1]
    n, k = wg.shape[0], choice.shape[-1]
    xt = x.reshape(-1, e)
    t = xt.shape[0]
    experts = choice.reshape(-1).astype(jnp.int32)  # (T*k,): token t's j-th choice at t*k + j
    order = jnp.argsort(experts, stable=True)  # the choices grouped by expert
    sizes = jnp.bincount(experts, length=n).astype(jnp.int32)
    y = gmlp_gpu(xt[order // k], wg, wu, wd, sizes, activation=act, inter_dtype=inter_dtype, out_dtype=down_dtype,
             precision=precision, **config)
    y = jnp.zeros_like(y).at[order].set(y).reshape(t, k, -1)  # back to (token, choice) order
    w = jnp.take_along_axis(combine.reshape(t, n), choice.reshape(t, k).astype(jnp.int32), axis=1)
    dt = jnp.result_type(y.dtype, w.dtype)
    out = jnp.sum(y.astype(dt) * w.astype(dt)[..., None], axis=1)
    return out.reshape(*lead, -1).astype(out_dtype)


def _act(g, u):
    """The reference between the up products and the down product (elementwise)."""
    a0 = jnp.asarray(jax.nn.sigmoid(g)).astype(jnp.bfloat16).astype(jnp.float32)
    a1 = jnp.asarray((g * a0)).astype(jnp.bfloat16).astype(jnp.float32)
    a2 = jnp.asarray((a1 * u)).astype(jnp.bfloat16).astype(jnp.float32)
    return a2


def kernel(x, router_weights, expert_gate_kernels, expert_up_kernels, expert_down_kernels, num_experts_per_tok, *, block_m=64, block_f=64, block_n=128, num_warps=8, num_stages=2):
    B = x.shape[0]
    S = x.shape[1]
    N = router_weights.shape[1]
    v0 = lax.dot_general(x, router_weights, (((2,), (0,)), ((), ())), precision=None, preferred_element_type=jnp.bfloat16)
    v1 = lax.top_k(v0, num_experts_per_tok, axis=2)[0]
    v2 = lax.top_k(v0, num_experts_per_tok, axis=2)[1]
    v3 = jnp.max(v1, axis=(2,))
    v4 = jnp.maximum(jnp.asarray(float("-inf"), jnp.bfloat16), v3)
    v5 = lax.broadcast_in_dim(v4, (B, S, 1), (0, 1))
    v6 = v5
    v7 = (v1 - v6)
    v8 = jnp.exp(v7)
    v9 = jnp.asarray(v8).astype(jnp.float32)
    v10 = jnp.sum(v9, axis=(2,))
    v11 = lax.broadcast_in_dim(v10, (B, S, 1), (0, 1))
    v12 = jnp.asarray(v11).astype(jnp.bfloat16)
    v13 = (v8 / v12)
    v14 = lax.broadcast_in_dim(v2, (B, S, num_experts_per_tok, 1), (0, 1, 2))
    v15 = lax.broadcasted_iota(jnp.int32, (1, 1, 1, N), 3)
    v16 = (v14 == v15)
    v17 = jnp.asarray(v16).astype(jnp.float32)
    v18 = lax.broadcast_in_dim(v13, (B, S, num_experts_per_tok, 1), (0, 1, 2))
    v19 = jnp.asarray(v18).astype(jnp.float32)
    v20 = (v17 * v19)
    v21 = jnp.sum(v20, axis=(2,))
    combine, choice = v21, v2  # the routing: weights (tokens..., N), top-k experts (tokens..., k)
    return _moe(x, combine, choice, expert_gate_kernels, expert_up_kernels, expert_down_kernels, act=_act, inter_dtype=jnp.bfloat16, down_dtype=jnp.bfloat16, out_dtype=jnp.float32, precision=None, block_m=block_m, block_f=block_f, block_n=block_n, num_warps=num_warps, num_stages=num_stages)
