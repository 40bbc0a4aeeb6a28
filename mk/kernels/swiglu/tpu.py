"""Gated MLP (SwiGLU) on TPU (Mosaic) with both up-projections and the down-projection fused.

``out = act(x @ wg, x @ wu) @ wd`` for x (M, E), wg/wu (E, F), wd (F, D). The
grid runs over row blocks and hidden blocks (the hidden axis last, a
reduction): each step multiplies the row block by one (E, block_f) slice of
both gate and up weights, applies the activation to the two (block_m,
block_f) products in VMEM and adds that hidden block's contribution to an f32
(block_m, D) accumulator through the matching (block_f, D) slice of wd. The
(M, F) hidden activations never go to HBM. The products before the activation
come out in ``inter_dtype`` (the inputs' dtype by default, as ``jnp.dot``
returns them), so a bf16 reference's rounding is kept.

Blocks are planned at trace time for the sizes the kernel is called with
against 3/4 of the chip's scoped VMEM (:func:`swiglu_vmem_bytes`: every block
double-buffered, padded to its tile): the row and hidden blocks shrink, and
when the whole E does not fit (jaxbench 9p at full: E = 8192, 30 MiB where v5e
gives a kernel 16 MiB) a third grid axis runs over E blocks, the gate and up
products accumulating in f32 scratch until the last E block applies the
activation and the down-projection.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _silu_gate(g, u):
    return jax.nn.sigmoid(g) * g * u


def _swiglu_tpu_kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref, acc_ref, *, nf, activation, inter_dtype, precision):
    f = pl.program_id(1)

    @pl.when(f == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    dims = (((1,), (0,)), ((), ()))
    x = x_ref[...]
    g = lax.dot_general(x, wg_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)
    u = lax.dot_general(x, wu_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)
    h = activation(g.astype(inter_dtype), u.astype(inter_dtype)).astype(wd_ref.dtype)
    acc_ref[...] += lax.dot_general(h, wd_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)

    @pl.when(f == nf - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _swiglu_split_kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref, acc_ref, g_ref, u_ref, *, nf, ne, activation,
                         inter_dtype, precision):
    f, k = pl.program_id(1), pl.program_id(2)

    @pl.when((f == 0) & (k == 0))
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(k == 0)
    def _zero_products():
        g_ref[...] = jnp.zeros_like(g_ref)
        u_ref[...] = jnp.zeros_like(u_ref)

    dims = (((1,), (0,)), ((), ()))
    x = x_ref[...]
    g_ref[...] += lax.dot_general(x, wg_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)
    u_ref[...] += lax.dot_general(x, wu_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)

    @pl.when(k == ne - 1)
    def _down():
        h = activation(g_ref[...].astype(inter_dtype), u_ref[...].astype(inter_dtype)).astype(wd_ref.dtype)
        acc_ref[...] += lax.dot_general(h, wd_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)

        @pl.when(f == nf - 1)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _vmem_limits():
    """(scoped VMEM a kernel gets by default, physical VMEM) of the TPU being compiled for; v5e's figures when
    Mosaic knows no chip (interpret mode on a CPU)."""
    if "tpu" not in str(getattr(jax.devices()[0], "device_kind", "")).lower():
        return 16 << 20, 128 << 20  # no TPU known here: plan for the smallest scoped VMEM
    info = pltpu.get_tpu_info()
    return (32 << 20 if info.generation >= 6 else 16 << 20), int(info.vmem_capacity_bytes)


def _padded(rows, cols, itemsize):
    """VMEM bytes of a (rows, cols) block padded to the (sublane, lane) tile of its dtype."""
    sub = 8 * max(1, 4 // itemsize)
    return -(-rows // sub) * sub * -(-cols // 128) * 128 * itemsize


def swiglu_vmem_bytes(bm, bf, be, e, d, *, x_itemsize, w_itemsize, out_itemsize):
    """VMEM the kernel's blocks take: inputs and output double-buffered, the f32 output accumulator, and with E in
    blocks (``be < e``) the f32 gate and up products."""
    ins = _padded(bm, be, x_itemsize) + 2 * _padded(be, bf, w_itemsize) + _padded(bf, d, w_itemsize)
    split = 2 * _padded(bm, bf, 4) if be < e else 0
    return 2 * ins + 2 * _padded(bm, d, out_itemsize) + _padded(bm, d, 4) + split


def _sizes(n, want, quantum):
    """Block sizes to try for an axis of n, largest first: the request fitted to n, then every smaller multiple of
    quantum dividing n."""
    first = _block(n, want, quantum)
    return [first] + [b for b in range(min(first, n - 1) // quantum * quantum, 0, -quantum) if b < first and n % b == 0]


def swiglu_blocks(m, e, f, d, *, block_m, block_f, budget, x_itemsize, w_itemsize, out_itemsize):
    """(bm, bf, be) whose blocks fit ``budget`` bytes of VMEM: the whole E with the largest row and hidden blocks
    that fit, else E in blocks (the widest that fits, at most 2048), else the smallest blocks."""
    sub = 8 * max(1, 4 // x_itemsize)
    rows, hidden = _sizes(m, block_m, sub), _sizes(f, block_f, 128)
    need = functools.partial(swiglu_vmem_bytes, e=e, d=d, x_itemsize=x_itemsize, w_itemsize=w_itemsize,
                             out_itemsize=out_itemsize)
    for bm in rows:
        for bf in hidden:
            if need(bm, bf, e) <= budget:
                return bm, bf, e
    widths = [b for b in _sizes(e, 2048, 128) if b < e]
    for bm in rows:
        for bf in hidden:
            for be in widths:
                if need(bm, bf, be) <= budget:
                    return bm, bf, be
    return rows[-1], hidden[-1], (widths or [e])[-1]


def _block(n, want, quantum):
    """The largest multiple of quantum dividing n and at most want; n itself when none does."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def swiglu_tpu(x, wg, wu, wd, *, activation=None, inter_dtype=None, out_dtype=None, precision=None, block_m=128,
               block_f=256, vmem_budget=None):
    """``activation(x @ wg, x @ wu) @ wd`` (default ``silu(g) * u``); x (M, E), wg/wu (E, F), wd (F, D).
    ``block_m``/``block_f`` are requests, fitted at trace time to ``vmem_budget`` bytes (default 3/4 of the chip's
    scoped VMEM), with E in blocks when the whole E does not fit."""
    (m, e), (e2, f), (f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2:
        raise ValueError(f"expected x (M, E), wg/wu (E, F), wd (F, D), got {x.shape=}, {wg.shape=}, {wu.shape=}, "
                         f"{wd.shape=}")
    out_dtype = out_dtype or x.dtype
    scoped, physical = _vmem_limits()
    budget = vmem_budget or scoped * 3 // 4
    sizes = dict(x_itemsize=jnp.dtype(x.dtype).itemsize, w_itemsize=jnp.dtype(wg.dtype).itemsize,
                 out_itemsize=jnp.dtype(out_dtype).itemsize)
    bm, bf, be = swiglu_blocks(m, e, f, d, block_m=block_m, block_f=block_f, budget=budget, **sizes)
    need = swiglu_vmem_bytes(bm, bf, be, e, d, **sizes)
    params = {"vmem_limit_bytes": int(min(max(scoped, need * 5 // 4 + (4 << 20)), physical * 15 // 16))} \
        if need > budget else {}
    if be < e:
        return pl.pallas_call(
            functools.partial(_swiglu_split_kernel, nf=f // bf, ne=e // be, activation=activation or _silu_gate,
                              inter_dtype=inter_dtype or x.dtype, precision=precision),
            grid=(m // bm, f // bf, e // be),
            in_specs=[pl.BlockSpec((bm, be), lambda i, j, k: (i, k)),
                      pl.BlockSpec((be, bf), lambda i, j, k: (k, j)),
                      pl.BlockSpec((be, bf), lambda i, j, k: (k, j)),
                      pl.BlockSpec((bf, d), lambda i, j, k: (j, 0))],
            out_specs=pl.BlockSpec((bm, d), lambda i, j, k: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((m, d), out_dtype),
            scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32), pltpu.VMEM((bm, bf), jnp.float32),
                            pltpu.VMEM((bm, bf), jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary"), **params),
        )(x, wg, wu, wd)
    return pl.pallas_call(
        functools.partial(_swiglu_tpu_kernel, nf=f // bf, activation=activation or _silu_gate,
                          inter_dtype=inter_dtype or x.dtype, precision=precision),
        grid=(m // bm, f // bf),
        in_specs=[pl.BlockSpec((bm, e), lambda i, j: (i, 0)),
                  pl.BlockSpec((e, bf), lambda i, j: (0, j)),
                  pl.BlockSpec((e, bf), lambda i, j: (0, j)),
                  pl.BlockSpec((bf, d), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((bm, d), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, d), out_dtype),
        scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"), **params),
    )(x, wg, wu, wd)
