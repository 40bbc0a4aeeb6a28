"""Gated MLP (SwiGLU) on GPU (Pallas Triton) with both up-projections and the down-projection fused.

The same computation as :mod:`mk.kernels.swiglu.tpu`. One program per (row
block, output-column block) loops over hidden blocks: the gate and up
products of its rows for one hidden block (accumulated over ``block_e``-wide
blocks of E, so no operand holds a whole row of x or column of wg), the
activation, then that block's contribution through wd, all in registers; the
(M, F) activations never go to HBM. Programs of one row block recompute the
same activations for their column blocks (``block_n`` = D avoids that when D
is small). The activation runs in f32 for 16-bit inputs (Triton lowers no
16-bit division). Sizes are zero-padded to power-of-two blocks (Triton's rule)
and padded hidden columns are masked to zero after the activation.

Block sizes are requests: a program's dot operands live in shared memory
(``num_stages`` buffers of the x, wg and wu blocks of the E loop, and of the
activation and wd blocks of the hidden loop) and its f32 accumulators (gate,
up, output) in registers, so ``_swiglu_fit`` halves them at trace time, from the
sizes the kernel is called with, until the estimate fits ``smem_bytes`` (the
chip's budget) and about 128 accumulator registers a thread.

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


def _swiglu_fit(bm, be, bf, bn, *, itemsize, num_warps, num_stages, smem_bytes, regs=128):
    """(bm, be, bf, bn) halved (never below 16) until a program's estimated Triton working set fits: shared memory
    (``num_stages`` buffers of the x (bm, be), wg and wu (be, bf) blocks, and of the activation (bm, bf) and wd
    (bf, bn) blocks) within ``smem_bytes``, and the f32 gate, up and output accumulators within ``regs`` registers
    a thread. E blocks go first, then hidden, then output columns, then rows."""
    def smem(bm, be, bf, bn):
        return num_stages * (bm * be + 2 * be * bf + bm * bf + bf * bn) * itemsize

    def over(bm, be, bf, bn):
        return (smem(bm, be, bf, bn) > smem_bytes, (2 * bm * bf + bm * bn) > regs * 32 * num_warps)

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


def _swiglu_gpu_kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref, *, nf, ne, block_e, block_f, hidden, activation,
                       inter_dtype, precision):
    dims = (((1,), (0,)), ((), ()))
    zeros = jnp.zeros((x_ref.shape[0], block_f), jnp.float32)

    def step(j, acc):
        cols = pl.ds(j * block_f, block_f)

        def k_step(k, gu):
            ks = pl.ds(k * block_e, block_e)
            x = x_ref[:, ks]
            g = gu[0] + lax.dot_general(x, wg_ref[ks, cols], dims, precision=precision,
                                        preferred_element_type=jnp.float32)
            u = gu[1] + lax.dot_general(x, wu_ref[ks, cols], dims, precision=precision,
                                        preferred_element_type=jnp.float32)
            return g, u

        g, u = lax.fori_loop(0, ne, k_step, (zeros, zeros))
        h = activation(g.astype(inter_dtype), u.astype(inter_dtype))
        live = j * block_f + lax.broadcasted_iota(jnp.int32, h.shape, 1) < hidden
        h = jnp.where(live, h, jnp.zeros_like(h)).astype(wd_ref.dtype)
        return acc + lax.dot_general(h, wd_ref[cols, :], dims, precision=precision, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, nf, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def swiglu_gpu(x, wg, wu, wd, *, activation=None, inter_dtype=None, out_dtype=None, precision=None, block_m=64,
               block_f=64, block_n=128, block_e=64, num_warps=4, num_stages=2, smem_bytes=192 << 10):
    """``activation(x @ wg, x @ wu) @ wd`` (default ``silu(g) * u``) on padded power-of-two blocks, fitted to
    ``smem_bytes`` of shared memory (see the module docstring)."""
    (m, e), (e2, f), (f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2:
        raise ValueError(f"expected x (M, E), wg/wu (E, F), wd (F, D), got {x.shape=}, {wg.shape=}, {wu.shape=}, "
                         f"{wd.shape=}")
    itemsize = max(jnp.dtype(a.dtype).itemsize for a in (x, wg, wu, wd))
    bm, be, bf, bn = _swiglu_fit(_fit(m, block_m)[0], _fit(e, block_e)[0], _fit(f, block_f)[0], _fit(d, block_n)[0],
                                 itemsize=itemsize, num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes)
    (bm, m_pad), (be, e_pad), (bf, f_pad), (bn, d_pad) = _fit(m, bm), _fit(e, be), _fit(f, bf), _fit(d, bn)
    x = jnp.pad(x, ((0, m_pad - m), (0, e_pad - e)))
    wg = jnp.pad(wg, ((0, e_pad - e), (0, f_pad - f)))
    wu = jnp.pad(wu, ((0, e_pad - e), (0, f_pad - f)))
    wd = jnp.pad(wd, ((0, f_pad - f), (0, d_pad - d)))
    out = pl.pallas_call(
        functools.partial(_swiglu_gpu_kernel, nf=f_pad // bf, ne=e_pad // be, block_e=be, block_f=bf, hidden=f,
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
