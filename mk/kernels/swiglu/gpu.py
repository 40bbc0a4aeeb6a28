"""Gated MLP (SwiGLU) on GPU (Pallas Triton) with both up-projections and the down-projection fused.

The same computation as :mod:`mk.kernels.swiglu.tpu`. One program per (row
block, output-column block) loops over hidden blocks: the gate and up
products of its rows for one hidden block (accumulated over ``block_e``-wide
blocks of E, so no operand holds a whole row of x or column of wg), the
activation, then that block's contribution through wd, all in registers; the
(M, F) activations never go to HBM. Programs of one row block recompute the
same activations for their column blocks (``block_n`` = D avoids that when D
is small). The products are rounded to the inputs' dtype, as the reference's
are (a bf16 LLaMA MLP at a fresh seed was 10% off without it), and the
activation runs in f32 for 16-bit inputs (Triton lowers no
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


def _swiglu_fit(bm, be, bf, bn, *, itemsize, num_warps, num_stages, smem_bytes, regs=128, ups=2):
    """(bm, be, bf, bn) halved (never below 16) until a program's estimated Triton working set fits: shared memory
    (``num_stages`` buffers of the x (bm, be), the ``ups`` up-weight (be, bf) blocks (2 gated, 1 not), and of the
    activation (bm, bf) and wd (bf, bn) blocks) within ``smem_bytes``, and the f32 products and output accumulators
    within ``regs`` registers a thread. E blocks go first, then hidden, then output columns, then rows."""
    def smem(bm, be, bf, bn):
        return num_stages * (bm * be + ups * be * bf + bm * bf + bf * bn) * itemsize

    def over(bm, be, bf, bn):
        return (smem(bm, be, bf, bn) > smem_bytes, (ups * bm * bf + bm * bn) > regs * 32 * num_warps)

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


def _float(x, dtype):
    """A floating side in the activation's dtype; a boolean or integer one (a mask, ids) as it is."""
    return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x


_NN = (((1,), (0,)), ((), ()))  # a (m, k) block times a (k, n) block
_NT = (((1,), (1,)), ((), ()))  # times an (n, k) block: a weight kept as (out, in), PyTorch's layout


def _swiglu_gpu_kernel(*refs, nf, ne, block_e, block_f, hidden, gated, nh, up_t, down_t, activation, inter_dtype,
                       product_dtype, precision, epilogue, down_dtype):
    x_ref, wg_ref, *rest = refs
    wu_ref = rest.pop(0) if gated else None
    wd_ref, sides, out_sides, o_ref = rest[0], rest[1:1 + nh], rest[1 + nh:-1], rest[-1]
    zeros = jnp.zeros((x_ref.shape[0], block_f), jnp.float32)

    def step(j, acc):
        cols = pl.ds(j * block_f, block_f)

        def k_step(k, gu):
            ks = pl.ds(k * block_e, block_e)
            x = x_ref[:, ks]

            def up(w_ref, acc):
                w = w_ref[cols, ks] if up_t else w_ref[ks, cols]
                return acc + lax.dot_general(x, w, _NT if up_t else _NN, precision=precision,
                                             preferred_element_type=jnp.float32)

            return (up(wg_ref, gu[0]), up(wu_ref, gu[1])) if gated else (up(wg_ref, gu[0]),)

        gu = lax.fori_loop(0, ne, k_step, (zeros, zeros) if gated else (zeros,))
        # the products rounded to their dtype first, as the reference's are, then the activation in inter_dtype
        h = activation(*(p.astype(product_dtype).astype(inter_dtype) for p in gu),
                       *(_float(r[:, cols], inter_dtype) for r in sides))
        live = j * block_f + lax.broadcasted_iota(jnp.int32, h.shape, 1) < hidden
        h = jnp.where(live, h, jnp.zeros_like(h)).astype(wd_ref.dtype)
        wd = wd_ref[:, cols] if down_t else wd_ref[cols, :]
        return acc + lax.dot_general(h, wd, _NT if down_t else _NN, precision=precision,
                                     preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, nf, step, jnp.zeros(o_ref.shape, jnp.float32))
    y = acc.astype(down_dtype)
    o_ref[...] = (y if epilogue is None else epilogue(y, *(r[...] for r in out_sides))).astype(o_ref.dtype)


def swiglu_gpu(x, wg, wu, wd, *, activation=None, inter_dtype=None, out_dtype=None, precision=None, block_m=64,
               block_f=64, block_n=128, block_e=64, num_warps=4, num_stages=2, smem_bytes=192 << 10, halves=False,
               up_t=False, down_t=False, hidden_sides=(), out_sides=(), epilogue=None, down_dtype=None,
               product_dtype=None):
    """``activation(x @ wg, x @ wu) @ wd`` (default ``silu(g) * u``) on padded power-of-two blocks, fitted to
    ``smem_bytes`` of shared memory (see the module docstring). ``wu=None``, ``halves``, ``up_t`` and ``down_t`` as
    in :func:`mk.kernels.swiglu.tpu.swiglu_tpu` (an ungated MLP, a fused gate-up weight, weights kept as (out, in)):
    transposed weights are read in place; a fused weight's halves are sliced apart here, where padding copies the
    weights anyway. ``hidden_sides``, ``out_sides``, ``epilogue`` and ``down_dtype`` as there too (the hidden sides
    reach the activation in its f32 dtype); ``product_dtype`` (the inputs' by default): what the products are rounded
    to before the activation, as the reference's are."""
    if halves and wu is not None:
        raise ValueError("halves=True takes the gate and up weights as wg's two halves: pass wu=None")
    if halves:
        f = (wg.shape[0] if up_t else wg.shape[1]) // 2
        wg, wu = (wg[:f], wg[f:]) if up_t else (wg[:, :f], wg[:, f:])
    m, e = x.shape
    e2, f = wg.shape[::-1] if up_t else wg.shape
    f2, d = wd.shape[::-1] if down_t else wd.shape
    if e != e2 or (wu is not None and wu.shape != wg.shape) or f != f2:
        raise ValueError(f"expected x (M, E), wg/wu (E, F) ((F, E) with up_t), wd (F, D) ((D, F) with down_t), got "
                         f"{x.shape=}, {wg.shape=}, {getattr(wu, 'shape', None)=}, {wd.shape=}")
    gated = wu is not None
    ups = [wg, wu] if gated else [wg]
    itemsize = max(jnp.dtype(a.dtype).itemsize for a in (x, *ups, wd))
    bm, be, bf, bn = _swiglu_fit(_fit(m, block_m)[0], _fit(e, block_e)[0], _fit(f, block_f)[0], _fit(d, block_n)[0],
                                 itemsize=itemsize, num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes,
                                 ups=1 + gated)
    (bm, m_pad), (be, e_pad), (bf, f_pad), (bn, d_pad) = _fit(m, bm), _fit(e, be), _fit(f, bf), _fit(d, bn)
    x = jnp.pad(x, ((0, m_pad - m), (0, e_pad - e)))
    up_pad = ((0, f_pad - f), (0, e_pad - e)) if up_t else ((0, e_pad - e), (0, f_pad - f))
    ups = [jnp.pad(w, up_pad) for w in ups]
    wd = jnp.pad(wd, ((0, d_pad - d), (0, f_pad - f)) if down_t else ((0, f_pad - f), (0, d_pad - d)))
    for a in hidden_sides:
        if a.shape != (1, f):
            raise ValueError(f"a hidden side is (1, F) = {(1, f)}, got {a.shape}")
    for a in out_sides:
        if a.shape not in ((1, d), (m, d)):
            raise ValueError(f"an output side is (1, D) or (M, D) = {(1, d)} or {(m, d)}, got {a.shape}")
    hs = [jnp.pad(a, ((0, 0), (0, f_pad - f))) for a in hidden_sides]
    row_side = [a.shape[0] == 1 for a in out_sides]  # one row: a (1, D) side whichever it is
    os_ = [jnp.pad(a, ((0, 0 if r else m_pad - m), (0, d_pad - d))) for a, r in zip(out_sides, row_side)]
    up_block = (f_pad, e_pad) if up_t else (e_pad, f_pad)
    out = pl.pallas_call(
        functools.partial(_swiglu_gpu_kernel, nf=f_pad // bf, ne=e_pad // be, block_e=be, block_f=bf, hidden=f,
                          gated=gated, nh=len(hs), up_t=up_t, down_t=down_t, activation=activation or _silu_gate,
                          precision=precision, epilogue=epilogue, down_dtype=down_dtype or x.dtype,
                          product_dtype=product_dtype or x.dtype,
                          # Triton lowers no 16-bit division (sigmoid): 16-bit activations run in f32
                          inter_dtype=inter_dtype or jnp.promote_types(x.dtype, jnp.float32)),
        grid=(m_pad // bm, d_pad // bn),
        in_specs=[pl.BlockSpec((bm, e_pad), lambda i, j: (i, 0)),
                  *[pl.BlockSpec(up_block, lambda i, j: (0, 0)) for _ in ups],
                  pl.BlockSpec((bn, f_pad), lambda i, j: (j, 0)) if down_t
                  else pl.BlockSpec((f_pad, bn), lambda i, j: (0, j)),
                  *[pl.BlockSpec((1, f_pad), lambda i, j: (0, 0)) for _ in hs],
                  *[pl.BlockSpec((1, bn), lambda i, j: (0, j)) if r else pl.BlockSpec((bm, bn), lambda i, j: (i, j))
                    for r in row_side]],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m_pad, d_pad), out_dtype or x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(x, *ups, wd, *hs, *os_)
    return out[:m, :d]
