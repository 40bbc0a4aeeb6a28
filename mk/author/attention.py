"""Flash-attention template: ``softmax(q k^T * scale [+ causal mask]) v`` with online softmax.

Recognised in the reference's jaxpr: exactly two batched products with a row
softmax (``reduce_max``, ``exp``, ``reduce_sum``) between them, batch dims
(B, H). The layout of q/k/v/out is read from the transposes around the
products; k/v with fewer heads than q is grouped-query attention (query head
``h`` reads kv head ``h // group``). The scale is the product of the scalar
factors on the scores. Causality is settled by probing the reference on a
float32 copy of a random case: it must match full or causal softmax attention
(with that scale and head grouping) everywhere, else the template declines (an
additive score bias, a sliding-window / block-sparse / padding mask, a soft
cap). When the reference's scores are 16-bit (bf16 einsum), the kernel rounds
its f32 score tiles to that dtype as the reference does (SCORE_DTYPE): with
large unscaled scores (q pre-scaled, as in 4p) that rounding dominates. The kernel
(Pallas TPU) walks key blocks on the grid's last axis with a running max and
sum in VMEM and skips key blocks entirely above the diagonal when causal. The
GPU kernel (Pallas Triton, which has no scratch memory) runs one program per
(batch*head, query block) and loops over key blocks with ``lax.fori_loop``,
carrying the running max/sum and f32 accumulator; when causal the loop stops at
the diagonal and only the blocks it crosses are masked. Triton needs power-of-two
blocks, so head_dim must be a power of two >= 16 and the sequences divisible by 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mk.author.emit import Unsupported
from mk.author.ir import Op, Program, Val, from_jaxpr
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.author.probe import arg_names, probes_for, signature
from mk.task import Task, np_dtype
from mk.targets import kernel_language


@dataclass(frozen=True)
class AttentionPattern:
    q: int  # task input indices
    k: int
    v: int
    layout: tuple[int, int, int, int]  # input axes holding (batch, head, seq, head_dim)
    out_layout: tuple[int, int, int, int]  # output axis i holds (batch, head, seq, head_dim)[out_layout[i]]
    scale: float
    group: int  # query heads per kv head (1: MHA)


def _back(v: Val, prod: dict[int, Op]) -> tuple[Val, tuple[int, ...] | None, bool]:
    """Follow casts/transposes (and a GQA head expansion) back to an input.

    Returns (input, perm, expanded): value axis i is input axis perm[i]; perm is None after an expansion."""
    perm: tuple[int, ...] | None = tuple(range(len(v.shape)))
    expanded = False
    while v.arg is None:
        op = prod.get(id(v))
        if op is None:
            raise Unsupported("an attention operand is not computed from an input")
        if op.prim == "convert_element_type":
            pass
        elif op.prim == "transpose":
            inner = tuple(op.params["permutation"])
            perm = None if perm is None else tuple(inner[i] for i in perm)
        elif op.prim in ("broadcast_in_dim", "reshape"):
            expanded, perm = True, None
        else:
            raise Unsupported(f"an attention operand is computed by {op.prim!r}")
        v = op.ins[0]
    return v, perm, expanded


def recognise(prog: Program) -> AttentionPattern:
    dots = [op for op in prog.ops if op.prim == "dot_general"]
    if len(dots) != 2:
        raise Unsupported(f"attention needs exactly two matrix products, found {len(dots)}")
    d1, d2 = dots
    i1, i2 = prog.ops.index(d1), prog.ops.index(d2)
    between = {op.prim for op in prog.ops[i1 + 1:i2]}
    if not {"exp", "reduce_max", "reduce_sum"} <= between:
        raise Unsupported("no row softmax between the two products")
    (lc1, rc1), (lb1, rb1) = d1.params["dimension_numbers"]
    (lc2, rc2), (lb2, rb2) = d2.params["dimension_numbers"]
    if len(lb1) != 2 or len(lc1) != 1 or len(lb2) != 2 or len(lc2) != 1 or len(d1.out.shape) != 4:
        raise Unsupported("the products are not (batch, head)-batched single contractions")
    prod = prog.producers()
    q, qperm, qexp = _back(d1.ins[0], prod)
    k, _, _ = _back(d1.ins[1], prod)
    try:
        v, _, _ = _back(d2.ins[1], prod)
        v_lhs = False
    except Unsupported:  # the product was written v-first: (b, h, d, q)
        v, _, _ = _back(d2.ins[0], prod)
        v_lhs = True
    if qexp or qperm is None or len({q.arg, k.arg, v.arg}) != 3:
        raise Unsupported("the query is not a (transposed) input, or q/k/v are not three distinct inputs")
    lfree = [i for i in range(4) if i not in lc1 and i not in lb1]
    roles = (qperm[lb1[0]], qperm[lb1[1]], qperm[lfree[0]], qperm[lc1[0]])
    if k.shape != v.shape or len(k.shape) != 4:
        raise Unsupported("k and v differ in shape")
    B, H, S, D = (q.shape[r] for r in roles)
    kb, kh, ks, kd = (k.shape[r] for r in roles)
    if kb != B or kd != D or kh == 0 or H % kh:
        raise Unsupported(f"k/v of shape {k.shape} do not match q {q.shape} in the same layout")
    scale = 1.0
    for op in prog.ops[i1 + 1:i2]:
        if op.prim in ("mul", "div") and len(op.ins) == 2 and op.ins[1].is_const and op.ins[1].shape == () \
                and op.ins[0].shape == d1.out.shape:
            scale = scale * float(op.ins[1].const) if op.prim == "mul" else scale / float(op.ins[1].const)
        elif op.prim == "mul" and op.ins[0].is_const and op.ins[0].shape == () and op.ins[1].shape == d1.out.shape:
            scale *= float(op.ins[0].const)
    out = prog.outs[0]
    if len(prog.outs) != 1 or len(out.shape) != 4:
        raise Unsupported("attention writes one 4-D output")
    operm = tuple(range(4))
    cur = out
    while id(cur) in prod and prod[id(cur)] is not d2:
        op = prod[id(cur)]
        if op.prim == "transpose":
            inner = tuple(op.params["permutation"])
            operm = tuple(inner[i] for i in operm)
        elif op.prim != "convert_element_type":
            raise Unsupported(f"the attention output is post-processed by {op.prim!r}")
        cur = op.ins[0]
    # d2's output axes are (batch, head) then the lhs's free axis then the rhs's
    d2_roles = (0, 1, 3, 2) if v_lhs else (0, 1, 2, 3)
    return AttentionPattern(q.arg, k.arg, v.arg, roles, tuple(d2_roles[i] for i in operm), scale, H // kh)


def _intended(xs: list[np.ndarray], pat: AttentionPattern, causal: bool) -> np.ndarray:
    """What the kernel computes (float64, on host): softmax(q k^T * scale [+ causal mask]) v in the task's layouts."""
    q, k, v = (np.transpose(np.asarray(xs[i], np.float64), pat.layout) for i in (pat.q, pat.k, pat.v))
    k, v = np.repeat(k, pat.group, axis=1), np.repeat(v, pat.group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * pat.scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.transpose(np.einsum("bhqk,bhkd->bhqd", p, v), pat.out_layout)


def _causal(task: Task, scale_name: str, pat: AttentionPattern) -> bool:
    """Probe the reference on a float32 copy of a random case: True when it is causal attention, False when full.

    The reference must match one of the kernel's two semantics (full or causal softmax attention with the
    recognised scale and head grouping) everywhere; anything else (an additive score bias, a sliding-window,
    block-sparse or padding mask, a soft cap) is declined."""
    import jax

    xs = [np.asarray(x) for x in task.make_inputs(scale_name, 7, "normal")]
    xs = [x.astype(np.float32) if np.issubdtype(x.dtype, np.floating) or x.dtype.name == "bfloat16" else x for x in xs]
    try:
        ref = np.asarray(jax.jit(task.bind(task.reference, scale_name))(*xs), np.float64)
    except Exception as e:  # noqa: BLE001 - a reference that rejects float32 copies cannot be probed
        raise Unsupported(f"could not probe the reference's mask on float32 inputs ({type(e).__name__}: {e})") from e
    bound = 2e-3 * float(np.abs(ref).max()) + 1e-5
    errs = {}
    for causal in (True, False):
        want = _intended(xs, pat, causal)
        if want.shape != ref.shape:
            raise Unsupported(f"the reference's output {ref.shape} is not the attention output {want.shape}")
        errs[causal] = float(np.abs(want - ref).max())
        if errs[causal] <= bound:
            return causal
    raise Unsupported(
        "the reference is neither full nor causal softmax attention with scale "
        f"{pat.scale:g}: on a probe input it differs from both by {min(errs.values()):.3g} (bound {bound:.3g}); "
        "its scores carry something else (an additive bias, a sliding-window, block-sparse or padding mask, a soft cap) "
        "that the flash-attention template does not implement")


def _scores_dtype(prog: Program, dot: Op):
    """The dtype the reference keeps its scores in: the product's, unless its only use casts it straight to
    another float (XLA folds a 16-bit round trip such as ``einsum(bf16).astype(f32)`` away under jit)."""
    users = [op for op in prog.ops if any(v is dot.out for v in op.ins)]
    if len(users) == 1 and users[0].prim == "convert_element_type" and \
            np.dtype(users[0].out.dtype).itemsize > np.dtype(dot.out.dtype).itemsize:
        return users[0].out.dtype
    return dot.out.dtype


def _score_dtype(dtype) -> str:
    """The kernel's SCORE_DTYPE: the reference's 16-bit score dtype (its rounding is mirrored), else None."""
    name = np.dtype(dtype).name
    return f"jnp.{name}" if name in ("bfloat16", "float16") else "None"


#: Triton block options: powers of two (Triton needs them) and >= 16 (its smallest dot)
_GPU_BLOCKS = (16, 32, 64, 128)
_TPU_BLOCKS = (128, 256, 512)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _gpu_space(t: Traced, pat: AttentionPattern) -> list[int]:
    """Power-of-two block sizes (Triton's rule, >= 16 for its dot) up to the authoring sequence; the kernel fits
    each to the sequence it is called with, zero-padding a sequence no power of two >= 16 divides."""
    n = t.shapes[pat.q][pat.layout[2]]
    opts = [b for b in _GPU_BLOCKS if b <= max(n, _GPU_BLOCKS[0])]
    return opts[-3:]


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    if not kernel_language(target):
        raise Unsupported(f"the flash-attention template writes Pallas TPU and GPU (Triton) kernels, not {target!r}")
    t0 = traced[0]
    pat = recognise(from_jaxpr(t0.jaxpr))
    for t in traced[1:]:
        other = recognise(from_jaxpr(t.jaxpr))
        if (other.layout, other.out_layout, other.q, other.k, other.v) != (pat.layout, pat.out_layout, pat.q, pat.k, pat.v):
            raise Unsupported("the attention layout changes between scales")
    causal = _causal(task, t0.scale, pat)
    prog = from_jaxpr(t0.jaxpr)
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    if not causal and any(op.prim == "select_n" for op in prog.ops[dots[0]:dots[1]]):
        raise Unsupported("the scores are masked, but not causally: the template has no general mask")
    score_dtype = _score_dtype(_scores_dtype(prog, prog.ops[dots[0]]))
    probes = probes_for(task, traced)
    scale_expr = _scale_expr(probes, pat, prog.ops[dots[0]].out.dtype)
    names = arg_names(task)
    kind = f"{'causal' if causal else 'full'}, {'GQA' if pat.group > 1 else 'MHA'}, scale {scale_expr}"
    used = probes.used(scale_expr)
    if kernel_language(target) == "triton":
        opts = _gpu_space(t0, pat)
        space = {"block_q": opts, "block_k": opts, "num_warps": [4, 8]}
        return Proposal(
            name="flash-attention-gpu",
            source=_render_gpu(task, names, used, pat, causal, scale_expr, space, score_dtype),
            rationale=f"flash attention ({kind}), Pallas Triton: one program per (batch*head, query block) loops over "
            "key blocks with an online softmax in registers (f32 accumulator)"
            + ("; the loop stops at the diagonal and only diagonal blocks are masked" if causal else ""),
            template="attention",
        )
    space = {"block_q": list(_TPU_BLOCKS), "block_k": list(_TPU_BLOCKS)}
    sublanes = 8 * max(1, 4 // min(np_dtype(task.args[i].dtype).itemsize for i in (pat.q, pat.k, pat.v)))
    return Proposal(
        name="flash-attention-tpu",
        source=_render(task, names, used, pat, causal, scale_expr, space, score_dtype, sublanes),
        rationale=f"flash attention ({kind}): online softmax over key blocks, scores never leave VMEM"
        + ("; key blocks above the diagonal skipped" if causal else ""),
        template="attention",
    )


def _scale_expr(probes, pat: AttentionPattern, score_dtype) -> str:
    """The score scale as source: an expression over the variables (``D ** -0.5``) or a number."""
    scales = [pat.scale]
    for t in probes.traces[1:]:
        try:
            scales.append(recognise(from_jaxpr(t.jaxpr)).scale)
        except Unsupported as exc:
            raise Unsupported(f"the attention pattern changes with the inputs' sizes or static values ({exc})") from exc
    expr = probes.fit(scales, dtype=score_dtype)
    if expr is not None:
        return expr
    if all(math.isclose(x, scales[0], rel_tol=1e-6) for x in scales):
        return repr(float(pat.scale))
    raise Unsupported(f"the score scale changes with the inputs' sizes or static values ({scales}) and is not a "
                      "function of them")


def _tuple(names: list[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _to_bhsd(pat: AttentionPattern) -> str:
    """q, k, v in (batch, head, seq, head_dim) from the task's inputs."""
    if pat.layout == (0, 1, 2, 3):
        return f"q, k, v = ins[{pat.q}], ins[{pat.k}], ins[{pat.v}]"
    return f"q, k, v = (jnp.transpose(ins[i], {pat.layout!r}) for i in ({pat.q}, {pat.k}, {pat.v}))"


def _from_bhsd(pat: AttentionPattern, out: str) -> str:
    return out if pat.out_layout == (0, 1, 2, 3) else f"jnp.transpose({out}, {pat.out_layout!r})"


def _vars(used: list) -> list[str]:
    return [f"    {v.name} = {v.source}" for v in used if v.name != v.source]


def _render(task: Task, names: list[str], used: list, pat: AttentionPattern, causal: bool, scale_expr: str,
            space: dict[str, list[int]], score_dtype: str, sublanes: int) -> str:
    var_lines = "\n".join(_vars(used))
    return f'''"""mk offline author: flash attention for {task.name} (target tpu, {'causal' if causal else 'non-causal'}).

Online softmax over key blocks; running max/sum and the output accumulator stay in VMEM. Sizes are read from the
arguments at trace time; block sizes are requests, fitted to the sequences the kernel is called with.
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {space!r}
CAUSAL = {causal}
SCORE_DTYPE = {score_dtype}
#: rows per sublane tile of the inputs' dtype (8 for 32-bit, 16 for 16-bit)
SUBLANES = {sublanes}
_MASKED = -1e30


def _block(n, want):
    """The largest multiple of SUBLANES that divides n and is at most want; n itself (one block spanning the axis,
    always a legal block shape) when there is none."""
    for b in range(min(want, n) // SUBLANES * SUBLANES, 0, -SUBLANES):
        if n % b == 0:
            return b
    return n


def _kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, scale, block_q, block_k, nk):
    qi, ki = pl.program_id(2), pl.program_id(3)

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, _MASKED, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def _step():
        q = q_ref[0, 0]
        k = k_ref[0, 0]
        v = v_ref[0, 0]
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        # the reference rounds its scores to SCORE_DTYPE (when set): mirror it so large scores agree
        s = s * scale if SCORE_DTYPE is None else (s.astype(SCORE_DTYPE) * scale).astype(jnp.float32)
        if CAUSAL:
            rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = ki * block_k + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, _MASKED)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    if CAUSAL:
        pl.when(ki * block_k <= qi * block_q + block_q - 1)(_step)
    else:
        _step()

    @pl.when(ki == nk - 1)
    def _done():
        o_ref[0, 0] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def kernel({signature(task, f"block_q={space['block_q'][-1]}, block_k={space['block_k'][-1]}")}):
    ins = {_tuple(names)}
{var_lines + chr(10) if var_lines else ""}    scale = {scale_expr}
    {_to_bhsd(pat)}
    batch, heads, seq, head_dim = q.shape
    kv_heads, kv_seq = k.shape[1], k.shape[2]
    group = heads // kv_heads
    block_q = _block(seq, block_q)
    block_k = _block(kv_seq, block_k)
    nk = kv_seq // block_k
    out = pl.pallas_call(
        functools.partial(_kernel, scale=scale, block_q=block_q, block_k=block_k, nk=nk),
        grid=(batch, heads, seq // block_q, nk),
        in_specs=[
            pl.BlockSpec((1, 1, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0)),
            pl.BlockSpec((1, 1, block_k, head_dim), lambda b, h, i, j: (b, h // group, j, 0)),
            pl.BlockSpec((1, 1, block_k, head_dim), lambda b, h, i, j: (b, h // group, j, 0)),
        ],
        out_specs=pl.BlockSpec((1, 1, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32), pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, head_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return {_from_bhsd(pat, "out")}
'''


def _render_gpu(task: Task, names: list[str], used: list, pat: AttentionPattern, causal: bool, scale_expr: str,
                space: dict[str, list[int]], score_dtype: str) -> str:
    block_k = 64 if 64 in space["block_k"] else space["block_k"][-1]
    var_lines = "\n".join(_vars(used))
    return f'''"""mk offline author: flash attention for {task.name} (target gpu, Pallas Triton, {'causal' if causal else 'non-causal'}).

One program per (batch*head, query block); it loops over key blocks with lax.fori_loop, keeping the running
max, running sum and f32 accumulator in registers. Block sizes are powers of two (Triton needs them), fitted at
trace time to the sizes the kernel is called with: a head_dim that is no power of two is zero-padded (zero
columns change no score and are sliced off), a sequence no power-of-two block >= 16 divides is zero-padded to
a multiple of the block and the padded keys are masked.
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

CONFIG_SPACE = {space!r}
CAUSAL = {causal}
SCORE_DTYPE = {score_dtype}
NUM_STAGES = 2
_MASKED = -1e30


def _block(n, want):
    """(block, padded n): the largest power of two >= 16 and at most want dividing n; when none does, a power of
    two block (at most want) with n padded to a multiple of it."""
    b = 1 << (want.bit_length() - 1)
    while b >= 16:
        if n % b == 0:
            return b, n
        b //= 2
    b = max(16, min(1 << (want.bit_length() - 1), 1 << (n - 1).bit_length()))
    return b, -(-n // b) * b


def _kernel(q_ref, k_ref, v_ref, o_ref, *, scale, block_q, block_k, nk, kv_len):
    qi = pl.program_id(1)
    q = q_ref[...]

    def step(j, carry, masked):
        m, l, acc = carry
        start = pl.multiple_of(j * block_k, block_k)
        k = k_ref[pl.ds(start, block_k), :]
        v = v_ref[pl.ds(start, block_k), :]
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        # the reference rounds its scores to SCORE_DTYPE (when set): mirror it so large scores agree
        s = s * scale if SCORE_DTYPE is None else (s.astype(SCORE_DTYPE) * scale).astype(jnp.float32)
        if masked:
            rows = qi * block_q + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
            cols = start + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
            s = jnp.where((cols <= rows) if CAUSAL else (cols < kv_len), s, _MASKED)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[:, None])
        l = alpha * l + jnp.sum(p, axis=1)
        acc = alpha[:, None] * acc + lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return m_new, l, acc

    carry = (jnp.full((block_q,), _MASKED, jnp.float32), jnp.zeros((block_q,), jnp.float32),
             jnp.zeros((block_q, q.shape[1]), jnp.float32))
    if CAUSAL:
        # key blocks wholly at or below the diagonal need no mask; blocks past the diagonal are never loaded
        # (padded keys lie past every real query's diagonal)
        n_full = jnp.minimum((qi * block_q + 1) // block_k, nk)
        n_end = jnp.minimum(((qi + 1) * block_q + block_k - 1) // block_k, nk)
        carry = lax.fori_loop(0, n_full, functools.partial(step, masked=False), carry)
        carry = lax.fori_loop(n_full, n_end, functools.partial(step, masked=True), carry)
    else:
        # blocks holding padded keys (past kv_len) are masked
        n_full = kv_len // block_k
        carry = lax.fori_loop(0, n_full, functools.partial(step, masked=False), carry)
        carry = lax.fori_loop(n_full, nk, functools.partial(step, masked=True), carry)
    _, l, acc = carry
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)


def kernel({signature(task, f"block_q={space['block_q'][-1]}, block_k={block_k}, num_warps=4")}):
    ins = {_tuple(names)}
{var_lines + chr(10) if var_lines else ""}    scale = {scale_expr}
    {_to_bhsd(pat)}
    batch, heads, seq, head_dim = q.shape
    kv_heads, kv_seq = k.shape[1], k.shape[2]
    group = heads // kv_heads
    block_q, q_pad = _block(seq, block_q)
    block_k, kv_pad = _block(kv_seq, block_k)
    d_pad = max(16, 1 << (head_dim - 1).bit_length())
    q = jnp.pad(q, ((0, 0), (0, 0), (0, q_pad - seq), (0, d_pad - head_dim)))
    k, v = (jnp.pad(t, ((0, 0), (0, 0), (0, kv_pad - kv_seq), (0, d_pad - head_dim))) for t in (k, v))
    out = pl.pallas_call(
        functools.partial(_kernel, scale=scale, block_q=block_q, block_k=block_k, nk=kv_pad // block_k, kv_len=kv_seq),
        grid=(batch * heads, q_pad // block_q),
        in_specs=[
            pl.BlockSpec((None, None, block_q, d_pad), lambda bh, i: (bh // heads, bh % heads, i, 0)),
            pl.BlockSpec((None, None, kv_pad, d_pad), lambda bh, i: (bh // heads, (bh % heads) // group, 0, 0)),
            pl.BlockSpec((None, None, kv_pad, d_pad), lambda bh, i: (bh // heads, (bh % heads) // group, 0, 0)),
        ],
        out_specs=pl.BlockSpec((None, None, block_q, d_pad), lambda bh, i: (bh // heads, bh % heads, i, 0)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=NUM_STAGES),
    )(q, k, v)
    return {_from_bhsd(pat, "out[:, :, :seq, :head_dim]")}
'''
