"""Grouped matmul on GPU (Pallas Triton): one program per (row tile, column tile), looping over its groups.

The same computation as :mod:`mk.kernels.gmm.tpu`. Triton has no scalar
prefetch and its programs run concurrently, so a tile that several groups
share is not visited once per group: its program reads the first and last
group touching it from a small table (computed from ``group_sizes`` in plain
JAX), loops over them with ``fori_loop`` and accumulates each group's masked
product in registers, then writes once. ``rhs`` stays in HBM whole and each
group's (block_k, block_n) slices are loaded by a dynamic group index. Sizes
are zero-padded to power-of-two blocks (Triton's rule); padded rows belong to
no group and come out zero. ``_gmlp_fit`` sizes the blocks of the gated-MLP
kernels built on these helpers (:mod:`mk.kernels.gmm.mlp_gpu`,
:mod:`mk.kernels.gmm.masked_gpu`) to the chip's shared memory.

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


def _fit(n, want):
    """(block, padded n): a power-of-two block >= 16 and at most want, n padded to a multiple of it."""
    b = max(16, min(_pow2(want), _pow2(n)))
    return b, -(-n // b) * b


def _gmlp_fit(bm, be, bf, bn, *, itemsize, num_warps, num_stages, smem_bytes, regs=128):
    """The gated-MLP kernels' blocks (rows, E, hidden, output columns) halved (never below 16) until a program's
    estimated Triton working set fits: shared memory (``num_stages`` buffers of the x (bm, be), wg and wu (be, bf)
    blocks, and of the activation (bm, bf) and wd (bf, bn) blocks) within ``smem_bytes``, and the f32 gate, up and
    output accumulators within ``regs`` registers a thread. E blocks go first, then hidden, output columns, rows."""
    def over(bm, be, bf, bn):
        smem = num_stages * (bm * be + 2 * be * bf + bm * bf + bf * bn) * itemsize
        return smem > smem_bytes, 2 * bm * bf + bm * bn > regs * 32 * num_warps

    while True:
        over_smem, over_regs = over(bm, be, bf, bn)
        if over_smem and be > 32:
            be //= 2
        elif (over_smem or over_regs) and bf > 32:
            bf //= 2
        elif (over_smem or over_regs) and bn > 32:
            bn //= 2
        elif (over_smem or over_regs) and bm > 16:
            bm //= 2
        elif over_smem and be > 16:
            be //= 2
        elif (over_smem or over_regs) and bf > 16:
            bf //= 2
        elif (over_smem or over_regs) and bn > 16:
            bn //= 2
        else:
            return bm, be, bf, bn


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
