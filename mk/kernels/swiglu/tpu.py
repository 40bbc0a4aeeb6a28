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


_NN = (((1,), (0,)), ((), ()))  # a (m, k) block times a (k, n) block
_NT = (((1,), (1,)), ((), ()))  # times an (n, k) block: a weight kept as (out, in), PyTorch's layout


def _refs(refs, gated, nh, no):
    """(x, wg, wu or None, wd, hidden sides, output sides, out, scratch) from the kernel's refs."""
    x, wg, *rest = refs
    wu = rest.pop(0) if gated else None
    wd, rest = rest[0], rest[1:]
    return x, wg, wu, wd, rest[:nh], rest[nh:nh + no], rest[nh + no], rest[nh + no + 1:]


def _act(activation, g, u, sides, inter_dtype):
    """The activation on the products rounded to ``inter_dtype`` and the hidden block of each hidden-side vector (a
    bias of the up-projection): ``activation(g, u, *sides)`` gated, ``activation(g, *sides)`` not."""
    ups = (g,) if u is None else (g, u)
    return activation(*(p.astype(inter_dtype) for p in ups), *(r[...] for r in sides))


def _finish(o_ref, acc, out_sides, epilogue, down_dtype):
    """The output block: the down-projection rounded to its dtype, then the epilogue (bias, residual, cast) on it
    and each output side's block."""
    y = acc.astype(down_dtype)
    o_ref[...] = (y if epilogue is None else epilogue(y, *(r[...] for r in out_sides))).astype(o_ref.dtype)


def _swiglu_tpu_kernel(*refs, nf, gated, nh, no, up_dims, down_dims, activation, inter_dtype, precision, epilogue,
                       down_dtype):
    x_ref, wg_ref, wu_ref, wd_ref, sides, out_sides, o_ref, (acc_ref,) = _refs(refs, gated, nh, no)
    f = pl.program_id(1)

    @pl.when(f == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]
    g = lax.dot_general(x, wg_ref[...], up_dims, precision=precision, preferred_element_type=jnp.float32)
    u = None if wu_ref is None else lax.dot_general(x, wu_ref[...], up_dims, precision=precision,
                                                    preferred_element_type=jnp.float32)
    h = _act(activation, g, u, sides, inter_dtype).astype(wd_ref.dtype)
    acc_ref[...] += lax.dot_general(h, wd_ref[...], down_dims, precision=precision, preferred_element_type=jnp.float32)

    @pl.when(f == nf - 1)
    def _store():
        _finish(o_ref, acc_ref[...], out_sides, epilogue, down_dtype)


def _swiglu_split_kernel(*refs, nf, ne, gated, nh, no, up_dims, down_dims, activation, inter_dtype, precision,
                         epilogue, down_dtype):
    x_ref, wg_ref, wu_ref, wd_ref, sides, out_sides, o_ref, (acc_ref, g_ref, *u_ref) = _refs(refs, gated, nh, no)
    f, k = pl.program_id(1), pl.program_id(2)

    @pl.when((f == 0) & (k == 0))
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(k == 0)
    def _zero_products():
        g_ref[...] = jnp.zeros_like(g_ref)
        for r in u_ref:
            r[...] = jnp.zeros_like(r)

    x = x_ref[...]
    g_ref[...] += lax.dot_general(x, wg_ref[...], up_dims, precision=precision, preferred_element_type=jnp.float32)
    if wu_ref is not None:
        u_ref[0][...] += lax.dot_general(x, wu_ref[...], up_dims, precision=precision,
                                         preferred_element_type=jnp.float32)

    @pl.when(k == ne - 1)
    def _down():
        h = _act(activation, g_ref[...], u_ref[0][...] if u_ref else None, sides, inter_dtype).astype(wd_ref.dtype)
        acc_ref[...] += lax.dot_general(h, wd_ref[...], down_dims, precision=precision,
                                        preferred_element_type=jnp.float32)

        @pl.when(f == nf - 1)
        def _store():
            _finish(o_ref, acc_ref[...], out_sides, epilogue, down_dtype)


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


def swiglu_vmem_bytes(bm, bf, be, e, d, *, x_itemsize, w_itemsize, out_itemsize, ups=2):
    """VMEM the kernel's blocks take: inputs and output double-buffered, the f32 output accumulator, and with E in
    blocks (``be < e``) the f32 products before the activation (``ups``: 2 gated, 1 not). A transposed weight's
    block pads the same bytes or more; both layouts are planned as (in, out)."""
    ins = _padded(bm, be, x_itemsize) + ups * max(_padded(be, bf, w_itemsize), _padded(bf, be, w_itemsize)) \
        + max(_padded(bf, d, w_itemsize), _padded(d, bf, w_itemsize))
    split = ups * _padded(bm, bf, 4) if be < e else 0
    return 2 * ins + 2 * _padded(bm, d, out_itemsize) + _padded(bm, d, 4) + split


def _sizes(n, want, quantum):
    """Block sizes to try for an axis of n, largest first: the request fitted to n, then every smaller multiple of
    quantum dividing n."""
    first = _block(n, want, quantum)
    return [first] + [b for b in range(min(first, n - 1) // quantum * quantum, 0, -quantum) if b < first and n % b == 0]


def swiglu_blocks(m, e, f, d, *, block_m, block_f, budget, x_itemsize, w_itemsize, out_itemsize, ups=2):
    """(bm, bf, be) whose blocks fit ``budget`` bytes of VMEM: the whole E with the largest row and hidden blocks
    that fit, else E in blocks (the widest that fits, at most 2048), else the smallest blocks."""
    sub = 8 * max(1, 4 // x_itemsize)
    rows, hidden = _sizes(m, block_m, sub), _sizes(f, block_f, 128)
    need = functools.partial(swiglu_vmem_bytes, e=e, d=d, x_itemsize=x_itemsize, w_itemsize=w_itemsize,
                             out_itemsize=out_itemsize, ups=ups)
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
               block_f=256, vmem_budget=None, halves=False, up_t=False, down_t=False, hidden_sides=(), out_sides=(),
               epilogue=None, down_dtype=None):
    """``activation(x @ wg, x @ wu) @ wd`` (default ``silu(g) * u``); x (M, E), wg/wu (E, F), wd (F, D).

    The MLPs models write, through one kernel: ``wu=None`` is an ungated MLP, ``activation(x @ wg) @ wd`` (ReLU²,
    GELU); ``halves=True`` a fused gate-up weight, wg (E, 2F) whose first F columns make the activation's first
    argument and the rest its second (``wu=None``); ``up_t``/``down_t``: the up weights (F, E) (or (2F, E)) and wd
    (D, F), kept as (out, in) as PyTorch ports do, read in place by the blocks' index maps (nothing is transposed in
    HBM). ``hidden_sides``: (1, F) arrays (an up-projection's bias), whose (1, block_f) block of the hidden block is
    passed to the activation after the products; ``epilogue(y, *blocks)`` runs on the finished output block ``y``
    (the down-projection in ``down_dtype``, by default the inputs') with the block of each of ``out_sides``: (1, D)
    arrays (a bias) or (M, D) (a residual), and its result is cast to ``out_dtype``. ``block_m``/``block_f`` are
    requests, fitted at trace time to ``vmem_budget`` bytes (default 3/4 of the
    chip's scoped VMEM), with E in blocks when the whole E does not fit."""
    if halves and wu is not None:
        raise ValueError("halves=True takes the gate and up weights as wg's two halves: pass wu=None")
    (m, e) = x.shape
    e2, f2x = wg.shape[::-1] if up_t else wg.shape
    f = f2x // 2 if halves else f2x
    f2, d = wd.shape[::-1] if down_t else wd.shape
    if e != e2 or (halves and f2x % 2) or (wu is not None and wu.shape != wg.shape) or f != f2:
        raise ValueError(f"expected x (M, E), wg/wu (E, F) (wg (E, 2F) with halves; transposed with up_t), wd (F, D) "
                         f"((D, F) with down_t), got {x.shape=}, {wg.shape=}, {getattr(wu, 'shape', None)=}, "
                         f"{wd.shape=}")
    gated = halves or wu is not None
    out_dtype = out_dtype or x.dtype
    scoped, physical = _vmem_limits()
    budget = vmem_budget or scoped * 3 // 4
    # an (M, D) output side (a residual) takes a block like the output's: planned as wider output items
    tiles = sum(jnp.dtype(a.dtype).itemsize for a in out_sides if a.shape[0] != 1)
    sizes = dict(x_itemsize=jnp.dtype(x.dtype).itemsize, w_itemsize=jnp.dtype(wg.dtype).itemsize,
                 out_itemsize=jnp.dtype(out_dtype).itemsize + tiles)
    bm, bf, be = swiglu_blocks(m, e, f, d, block_m=block_m, block_f=block_f, budget=budget, ups=1 + gated, **sizes)
    if halves and bf % 128 and bf != f2x:
        # a block of one half is not a legal block of the fused weight (its lanes need 128 columns): split it in HBM
        first, second = (wg[:f], wg[f:]) if up_t else (wg[:, :f], wg[:, f:])
        return swiglu_tpu(x, first, second, wd, activation=activation, inter_dtype=inter_dtype, out_dtype=out_dtype,
                          precision=precision, block_m=block_m, block_f=block_f, vmem_budget=vmem_budget,
                          up_t=up_t, down_t=down_t, hidden_sides=hidden_sides, out_sides=out_sides,
                          epilogue=epilogue, down_dtype=down_dtype)
    need = swiglu_vmem_bytes(bm, bf, be, e, d, ups=1 + gated, **sizes)
    params = {"vmem_limit_bytes": int(min(max(scoped, need * 5 // 4 + (4 << 20)), physical * 15 // 16))} \
        if need > budget else {}
    split = be < e
    second = f // bf if halves else 0  # the up half's first block along the fused weight's hidden axis

    def up_spec(off):
        if up_t:
            return pl.BlockSpec((bf, be), (lambda i, j, k: (j + off, k)) if split else (lambda i, j: (j + off, 0)))
        return pl.BlockSpec((be, bf), (lambda i, j, k: (k, j + off)) if split else (lambda i, j: (0, j + off)))

    x_spec = pl.BlockSpec((bm, be), (lambda i, j, k: (i, k)) if split else (lambda i, j: (i, 0)))
    if down_t:
        wd_spec = pl.BlockSpec((d, bf), (lambda i, j, k: (0, j)) if split else (lambda i, j: (0, j)))
    else:
        wd_spec = pl.BlockSpec((bf, d), (lambda i, j, k: (j, 0)) if split else (lambda i, j: (j, 0)))
    out_spec = pl.BlockSpec((bm, d), (lambda i, j, k: (i, 0)) if split else (lambda i, j: (i, 0)))
    for a in hidden_sides:
        if a.shape != (1, f):
            raise ValueError(f"a hidden side is (1, F) = {(1, f)}, got {a.shape}")
    for a in out_sides:
        if a.shape not in ((1, d), (m, d)):
            raise ValueError(f"an output side is (1, D) or (M, D) = {(1, d)} or {(m, d)}, got {a.shape}")
    side_specs = [pl.BlockSpec((1, bf), (lambda i, j, k: (0, j)) if split else (lambda i, j: (0, j)))
                  for _ in hidden_sides]
    whole_row = pl.BlockSpec((1, d), (lambda i, j, k: (0, 0)) if split else (lambda i, j: (0, 0)))
    side_specs += [whole_row if a.shape[0] == 1 else out_spec for a in out_sides]  # one row: (1, D) either way
    ups = [wg, wg if halves else wu] if gated else [wg]
    specs = [up_spec(0), up_spec(second)] if gated else [up_spec(0)]
    common = dict(gated=gated, nh=len(hidden_sides), no=len(out_sides), up_dims=_NT if up_t else _NN,
                  down_dims=_NT if down_t else _NN, activation=activation or _silu_gate,
                  inter_dtype=inter_dtype or x.dtype, precision=precision, epilogue=epilogue,
                  down_dtype=down_dtype or x.dtype)
    scratch = [pltpu.VMEM((bm, d), jnp.float32)]
    if split:
        body = functools.partial(_swiglu_split_kernel, nf=f // bf, ne=e // be, **common)
        grid, sem = (m // bm, f // bf, e // be), ("parallel", "arbitrary", "arbitrary")
        scratch += [pltpu.VMEM((bm, bf), jnp.float32)] * (1 + gated)
    else:
        body = functools.partial(_swiglu_tpu_kernel, nf=f // bf, **common)
        grid, sem = (m // bm, f // bf), ("parallel", "arbitrary")
    return pl.pallas_call(
        body,
        grid=grid,
        in_specs=[x_spec, *specs, wd_spec, *side_specs],
        out_specs=out_spec,
        out_shape=jax.ShapeDtypeStruct((m, d), out_dtype),
        scratch_shapes=scratch,
        compiler_params=pltpu.CompilerParams(dimension_semantics=sem, **params),
    )(x, *ups, wd, *hidden_sides, *out_sides)
