"""Gated MLP (SwiGLU) on GPU (Pallas Triton) with both up-projections and the down-projection fused.

The same computation as :mod:`mk.kernels.swiglu.tpu`. One program per (row
block, output-column block) loops over hidden blocks: the gate and up
products of its rows for one hidden block, the activation, then that block's
contribution through wd, all in registers; the (M, F) activations never go to
HBM. Programs of one row block recompute the same activations for their
column blocks (``block_n`` = D avoids that when D is small). The activation runs in f32 for 16-bit
inputs (Triton lowers no 16-bit division). Sizes are
zero-padded to power-of-two blocks (Triton's rule) and padded hidden columns
are masked to zero after the activation.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _silu_gate(g, u):
    return jax.nn.sigmoid(g) * g * u


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _fit(n, want):
    """(block, padded n): a power-of-two block >= 16 and at most want, n padded to a multiple of it."""
    b = max(16, min(_pow2(want), _pow2(n)))
    return b, -(-n // b) * b


def _swiglu_gpu_kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref, *, nf, block_f, hidden, activation, inter_dtype,
                       precision):
    dims = (((1,), (0,)), ((), ()))
    x = x_ref[...]

    def step(j, acc):
        cols = pl.ds(j * block_f, block_f)
        g = lax.dot_general(x, wg_ref[:, cols], dims, precision=precision, preferred_element_type=jnp.float32)
        u = lax.dot_general(x, wu_ref[:, cols], dims, precision=precision, preferred_element_type=jnp.float32)
        h = activation(g.astype(inter_dtype), u.astype(inter_dtype))
        live = j * block_f + lax.broadcasted_iota(jnp.int32, h.shape, 1) < hidden
        h = jnp.where(live, h, jnp.zeros_like(h)).astype(wd_ref.dtype)
        return acc + lax.dot_general(h, wd_ref[cols, :], dims, precision=precision, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, nf, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def swiglu_gpu(x, wg, wu, wd, *, activation=None, inter_dtype=None, out_dtype=None, precision=None, block_m=64,
               block_f=64, block_n=128, num_warps=4, num_stages=2):
    """``activation(x @ wg, x @ wu) @ wd`` (default ``silu(g) * u``) on padded power-of-two blocks."""
    (m, e), (e2, f), (f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2:
        raise ValueError(f"expected x (M, E), wg/wu (E, F), wd (F, D), got {x.shape=}, {wg.shape=}, {wu.shape=}, "
                         f"{wd.shape=}")
    (bm, m_pad), (bf, f_pad), (bn, d_pad) = _fit(m, block_m), _fit(f, block_f), _fit(d, block_n)
    e_pad = max(16, _pow2(e))
    x = jnp.pad(x, ((0, m_pad - m), (0, e_pad - e)))
    wg = jnp.pad(wg, ((0, e_pad - e), (0, f_pad - f)))
    wu = jnp.pad(wu, ((0, e_pad - e), (0, f_pad - f)))
    wd = jnp.pad(wd, ((0, f_pad - f), (0, d_pad - d)))
    out = pl.pallas_call(
        functools.partial(_swiglu_gpu_kernel, nf=f_pad // bf, block_f=bf, hidden=f,
                          activation=activation or _silu_gate, precision=precision,
                          # Triton lowers no 16-bit division (sigmoid): 16-bit activations run in f32
                          inter_dtype=inter_dtype or jnp.promote_types(x.dtype, jnp.float32)),
        grid=(m_pad // bm, d_pad // bn),
        in_specs=[pl.BlockSpec((bm, e_pad), lambda i, j: (i, 0)),
                  pl.BlockSpec((e_pad, f_pad), lambda i, j: (0, 0)),
                  pl.BlockSpec((e_pad, f_pad), lambda i, j: (0, 0)),
                  pl.BlockSpec((f_pad, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m_pad, d_pad), out_dtype or x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(x, wg, wu, wd)
    return out[:m, :d]
