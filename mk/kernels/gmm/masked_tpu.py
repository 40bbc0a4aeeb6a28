"""Routed gated MLP on TPU (Mosaic) without sorting: every (token tile, expert) pair that any token chose, fused.

``out[t] = sum_n w[t, n] * cast(act(x_t @ wg[n], x_t @ wu[n]) @ wd[n])`` where ``w`` (T, N) is the combine weight
(zero where token t did not choose expert n). The grid is (token tiles, experts, hidden blocks); a (tile, expert)
pair that no token of the tile chose is skipped (``chosen``, (tiles, N) in scalar prefetch, computed from ``w``
in plain JAX) and its weight blocks are not fetched (their index stays on the last needed block). A chosen pair
accumulates its hidden blocks in an f32 VMEM accumulator, rounds the result to ``down_dtype`` as a dense
reference does per expert, and adds it times the tile's weight column into the output accumulator. No gather,
no sort, no (T, N, hidden) intermediate; the work is dense over the experts a tile touches, so it suits few tokens
per tile or skewed routing (the sorted grouped kernel, :mod:`mk.kernels.gmm.mlp_tpu`, suits many tokens).

Self-contained (jax only) but for ``_block`` of :mod:`mk.kernels.gmm.tpu`, copied before it; mk's offline author
copies both verbatim into the kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mk.kernels.gmm.tpu import _block  # copied before this module in a written file


def _silu_gate_m(g, u):
    return jax.nn.sigmoid(g) * g * u


def _masked_tpu_kernel(chosen_ref, x_ref, wg_ref, wu_ref, wd_ref, w_ref, o_ref, acc_ref, out_ref, *, n_experts, nf,
                       activation, inter_dtype, down_dtype, precision):
    i, n, f = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    live = chosen_ref[i, n] > 0

    @pl.when((n == 0) & (f == 0))
    def _zero_out():
        out_ref[...] = jnp.zeros_like(out_ref)

    @pl.when(f == 0)
    def _zero_expert():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(live)
    def _step():
        dims = (((1,), (0,)), ((), ()))
        x = x_ref[...]
        g = lax.dot_general(x, wg_ref[0], dims, precision=precision, preferred_element_type=jnp.float32)
        u = lax.dot_general(x, wu_ref[0], dims, precision=precision, preferred_element_type=jnp.float32)
        h = activation(g.astype(inter_dtype), u.astype(inter_dtype)).astype(wd_ref.dtype)
        acc_ref[...] += lax.dot_general(h, wd_ref[0], dims, precision=precision, preferred_element_type=jnp.float32)

    @pl.when(live & (f == nf - 1))
    def _combine():
        w = w_ref[...]
        col = lax.broadcasted_iota(jnp.int32, w.shape, 1)
        wn = jnp.sum(jnp.where(col == n, w, jnp.zeros_like(w)), axis=1, keepdims=True).astype(jnp.float32)
        out_ref[...] += acc_ref[...].astype(down_dtype).astype(jnp.float32) * wn

    @pl.when((n == n_experts - 1) & (f == nf - 1))
    def _store():
        o_ref[...] = out_ref[...].astype(o_ref.dtype)


def masked_mlp_tpu(x, wg, wu, wd, w, *, activation=None, inter_dtype=None, down_dtype=None, out_dtype=None,
                   precision=None, block_m=128, block_f=256):
    """x (T, E); wg/wu (N, E, F); wd (N, F, D); w (T, N) combine weights, zero where not chosen -> (T, D)."""
    (t, e), (n, e2, f), (n2, f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2 or n != n2 or w.shape != (t, n):
        raise ValueError(f"expected x (T, E), wg/wu (N, E, F), wd (N, F, D), w (T, N), got {x.shape=}, {wg.shape=}, "
                         f"{wu.shape=}, {wd.shape=}, {w.shape=}")
    sublanes = 8 * max(1, 4 // jnp.dtype(x.dtype).itemsize)
    bm, bf = _block(t, block_m, sublanes), _block(f, block_f, 128)
    nf = f // bf
    chosen = jnp.any(w.reshape(t // bm, bm, n) != 0, axis=1).astype(jnp.int32)  # (tiles, N)

    def wblock(i, nn, ff, ch):  # a skipped pair keeps the last block, so nothing is fetched for it
        return jnp.where(ch[i, nn] > 0, ff, nf - 1)

    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(t // bm, n, nf),
        in_specs=[
            pl.BlockSpec((bm, e), lambda i, nn, ff, ch: (i, 0)),
            pl.BlockSpec((1, e, bf), lambda i, nn, ff, ch: (nn, 0, wblock(i, nn, ff, ch))),
            pl.BlockSpec((1, e, bf), lambda i, nn, ff, ch: (nn, 0, wblock(i, nn, ff, ch))),
            pl.BlockSpec((1, bf, d), lambda i, nn, ff, ch: (nn, wblock(i, nn, ff, ch), 0)),
            pl.BlockSpec((bm, n), lambda i, nn, ff, ch: (i, 0)),
        ],
        out_specs=pl.BlockSpec((bm, d), lambda i, nn, ff, ch: (i, 0)),
        scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32), pltpu.VMEM((bm, d), jnp.float32)],
    )
    return pl.pallas_call(
        functools.partial(_masked_tpu_kernel, n_experts=n, nf=nf, activation=activation or _silu_gate_m,
                          inter_dtype=inter_dtype or x.dtype, down_dtype=down_dtype or x.dtype, precision=precision),
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((t, d), out_dtype or jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(chosen, x, wg, wu, wd, w)
