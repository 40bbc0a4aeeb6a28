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
large unscaled scores (q pre-scaled, as in 4p) that rounding dominates.

The kernels are mk/kernels/flash_attention, copied into the written file; the
template proposes two block schedules per target (variants with their own
names and plans): TPU key blocks as an "arbitrary" grid axis with VMEM scratch
accumulators (causal: blocks above the diagonal skipped, not fetched), or the
head's whole key/value sequence resident in VMEM with the key loop in the
kernel; GPU (Triton) a one-pass online softmax, or two passes (row statistics,
then normalised probabilities times v). :func:`render` is shared with the
score-bias recogniser (:mod:`mk.author.flex`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mk.author.emit import language_stem, Unsupported
from mk.author.ir import Op, Program, Val, from_jaxpr
from mk.author.proposal import Proposal
from mk.author.trace import Traced, smallest_scale
from mk.author.emit import family_section, file_head
from mk.author.probe import arg_names, probes_for, signature
from mk.author.attention_bwd import with_backward  # the backward section (kernel_bwd), one hook in propose
from mk.author.attention_layout import from_bhsd, names_tuple, to_bhsd, var_lines
from mk.kernels.flash_attention import SCHEDULES, Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec


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
    if len(k.shape) != 4 or len(v.shape) != 4 or \
            any(k.shape[r] != v.shape[r] for r in roles[:3]):  # v's head dim is its own (the kernels take Dv)
        raise Unsupported(f"k {k.shape} and v {v.shape} differ in batch, heads or sequence")
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


def _intended(xs: list[np.ndarray], pat: AttentionPattern, causal: bool, bias: np.ndarray | None = None) -> np.ndarray:
    """What the kernel computes (float64, on host): softmax(q k^T * scale [+ bias] [+ causal mask]) v in the task's
    layouts; ``bias`` in (batch, head, query, key), broadcastable."""
    q, k, v = (np.transpose(np.asarray(xs[i], np.float64), pat.layout) for i in (pat.q, pat.k, pat.v))
    k, v = np.repeat(k, pat.group, axis=1), np.repeat(v, pat.group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * pat.scale
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.transpose(np.einsum("bhqk,bhkd->bhqd", p, v), pat.out_layout)


#: the probe cases a recognised attention is checked on against the reference: (seed, factor on the float inputs,
#: bound relative to the output's largest value). A random case, and one twice as large (scores four times
#: larger: a soft cap or a clamp on the scores is invisible on small ones); large scores make softmax sensitive to
#: float32 rounding, hence its looser bound
PROBES = ((7, 1.0, 2e-3), (8, 2.0, 1e-2))


def probe_inputs(task: Task, scale_name: str, seed: int, factor: float) -> list[np.ndarray]:
    """One probe case: the task's inputs from a normal draw, floats as float32 times ``factor``."""
    xs = [np.asarray(x) for x in task.make_inputs(scale_name, seed, "normal")]
    return [x.astype(np.float32) * np.float32(factor) if np.issubdtype(x.dtype, np.floating)
            or x.dtype.name == "bfloat16" else x for x in xs]

#: what a scale and a causal mask are made of on the scores (an additive bias adds ``add``)
_PLAIN_OPS = frozenset({"mul", "div", "convert_element_type", "select_n"})


def plain_ops(prog: Program, i1: int, i2: int, extra: frozenset[str]) -> None:
    """Decline scores that pass through anything but a scale, casts, a mask (and ``extra``) before the softmax: a soft
    cap or a clamp is invisible on a probe's small scores (the attention-core recogniser writes those)."""
    from mk.author import score_mod

    mod = score_mod.find(prog, i1, i2)
    other = sorted({op.prim for op in mod.ops} - _PLAIN_OPS - extra)
    if other:
        raise Unsupported(f"the scores pass through {', '.join(other)} before the softmax: not a scale, a causal mask "
                          "or a bias")


def same_mask_everywhere(probes, causal: bool) -> None:
    """Decline a mask that is the kernel's causal (or no) mask at the probed size only: a sliding window wider than the
    authoring sequence is causal there. The mask is evaluated at every size the probes traced."""
    from mk.author import score_mod

    for t in probes.traces:
        prog = from_jaxpr(t.jaxpr)
        dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
        if not score_mod.keeps(score_mod.find(prog, dots[0], dots[1]), causal):
            raise Unsupported(f"the mask on the scores is {'causal' if causal else 'none'} at the probed size but not "
                              "at every size traced (a window wider than that sequence, an offset), or its fill is "
                              f"above {score_mod.EXCLUDING_FILL:g} and takes part in the softmax: the flash-attention "
                              "template has only its causal flag")


def _causal(task: Task, scale_name: str, pat: AttentionPattern, bias_of=None, what: str = "softmax attention") -> bool:
    """Probe the reference on a float32 copy of a random case: True when it is causal attention, False when full.

    The reference must match one of the kernel's two semantics (full or causal softmax attention with the
    recognised scale and head grouping) everywhere; anything else (an additive score bias, a sliding-window,
    block-sparse or padding mask, a soft cap) is declined."""
    import jax

    errs: dict[bool, float] = {}
    cases = []
    for seed, factor, rel in PROBES:
        xs = probe_inputs(task, scale_name, seed, factor)
        try:
            ref = np.asarray(jax.jit(task.bind(task.reference, scale_name))(*xs), np.float64)
        except Exception as e:  # noqa: BLE001 - a reference that rejects float32 copies cannot be probed
            raise Unsupported(f"could not probe the reference's mask on float32 inputs ({type(e).__name__}: {e})") from e
        cases.append((xs, ref, rel * float(np.abs(ref).max()) + 1e-5))
    for causal in (True, False):
        worst = 0.0
        for xs, ref, bound in cases:
            want = _intended(xs, pat, causal, None if bias_of is None else bias_of(xs))
            if want.shape != ref.shape:
                raise Unsupported(f"the reference's output {ref.shape} is not the attention output {want.shape}")
            worst = max(worst, float(np.abs(want - ref).max()) / bound)
        errs[causal] = worst
        if worst <= 1:
            return causal
    raise Unsupported(
        f"the reference is neither full nor causal {what} with scale "
        f"{pat.scale:g}: on a probe input it differs from both by {min(errs.values()):.3g} times the bound; "
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


def propose(task: Task, traced: list[Traced], target: str) -> list[Proposal]:
    if not kernel_language(target):
        raise Unsupported(f"the flash-attention template writes Pallas TPU and GPU (Triton) kernels, not {target!r}")
    t0 = traced[0]
    pat = recognise(from_jaxpr(t0.jaxpr))
    for t in traced[1:]:
        other = recognise(from_jaxpr(t.jaxpr))
        if (other.layout, other.out_layout, other.q, other.k, other.v) != (pat.layout, pat.out_layout, pat.q, pat.k, pat.v):
            raise Unsupported("the attention layout changes between scales")
    prog = from_jaxpr(t0.jaxpr)
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    plain_ops(prog, dots[0], dots[1], frozenset())
    causal = _causal(task, smallest_scale(traced), pat)
    if not causal and any(op.prim == "select_n" for op in prog.ops[dots[0]:dots[1]]):
        raise Unsupported("the scores are masked, but not causally: the template has no general mask")
    score_dtype = _score_dtype(_scores_dtype(prog, prog.ops[dots[0]]))
    probes = probes_for(task, traced)
    same_mask_everywhere(probes, causal)
    scale_expr = _scale_expr(probes, pat, prog.ops[dots[0]].out.dtype)
    kind = f"{'causal' if causal else 'full'}, {'GQA' if pat.group > 1 else 'MHA'}, scale {scale_expr}"
    return [Proposal(name=f"flash-attention-{target}" + ("" if schedule == "online" else f"-{schedule}"),
                     source=with_backward(render(task, t0, pat, probes, target, schedule, causal=causal,
                                                 scale_expr=scale_expr, score_dtype=score_dtype),
                                          task, pat, probes, target, causal=causal, scale_expr=scale_expr),
                     rationale=f"flash attention ({kind}), {plan(target, schedule, causal)}", template="attention")
            for schedule in SCHEDULES]


#: (target language, schedule) -> the plan text of that block schedule
_PLANS = {
    ("mosaic", "online"): "Pallas TPU: key blocks as the grid's last ('arbitrary') axis with the running max, sum "
                          "and f32 accumulator in VMEM scratch; scores never leave VMEM",
    ("mosaic", "resident"): "Pallas TPU: one grid step per query block holds its head's whole key/value sequence "
                            "in VMEM and walks key blocks in a fori_loop carrying max, sum and accumulator",
    ("triton", "online"): "Pallas Triton: one program per (batch*head, query block) loops over key blocks with an "
                          "online softmax in registers (f32 accumulator)",
    ("triton", "resident"): "Pallas Triton: one program per (batch*head, query block) makes two passes over the "
                            "key blocks, row max and sum first, then the normalised probabilities times v",
}


def plan(target: str, schedule: str, causal: bool) -> str:
    """The plan text of one block schedule on ``target``."""
    text = _PLANS[(kernel_language(target), schedule)]
    if causal:
        text += ("; key blocks above the diagonal skipped" if (kernel_language(target), schedule) == ("mosaic", "online")
                 else "; the loop stops at the diagonal and only diagonal blocks are masked")
    return text


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


#: the written ``kernel``'s locals (an input of that name is read through ``ins`` before they are assigned)
_LOCALS = frozenset({"scale", "bias", "out"})
_FAMILY_NAMES = {"flash_attention_tpu", "flash_attention_tpu_loop", "flash_attention_gpu",
                 "flash_attention_gpu_two_pass", "_fa_block", "_fa_fit", "_sublanes", "_scores", "_fit", "_bias_spec",
                 "_grid_kernel", "_loop_kernel", "_tile_scores", "_score_fn", "_ranges", "_one_pass_kernel",
                 "_two_pass_kernel", "_call", "_MASKED", "CAUSAL", "SCORE_DTYPE", "scale", "bias", "out"}


def render(task: Task, t0: Traced, pat: AttentionPattern, probes, target: str, schedule: str, *, causal: bool,
           scale_expr: str, score_dtype: str, bias: tuple[int, list[str]] | None = None, what: str = "flash attention"
           ) -> str:
    """A standalone kernel file: mk/kernels/flash_attention/<target>.py copied unchanged, then ``kernel`` putting
    the task's inputs in (batch, head, seq, head_dim) and calling the ``schedule``'s kernel. ``bias``: (input
    index, source lines turning ``bias`` (that input) into a rank-4 score bias in (batch, head, query, key))."""
    names = arg_names(task)
    clash = set(names) & (_FAMILY_NAMES - _LOCALS)  # a local is assigned after ``ins`` holds the inputs
    if clash:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(clash)}")
    gpu = kernel_language(target) == "triton"
    shape = t0.shapes[pat.q]
    kv_shape = t0.shapes[pat.k]
    itemsize = min(np_dtype(task.args[i].dtype).itemsize for i in (pat.q, pat.k, pat.v))
    shapes = Shapes(shape[pat.layout[0]], shape[pat.layout[1]], shape[pat.layout[2]], kv_shape[pat.layout[2]],
                    shape[pat.layout[3]], itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    fn = SCHEDULES[schedule][1 if gpu else 0].__name__
    bias_lines = bias[1] if bias else []
    used = probes.used(scale_expr, *bias_lines)
    bound = var_lines(used)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    text = (f"{what} ({'causal' if causal else 'non-causal'}): {plan(target, schedule, causal)}. The kernel is "
            f"mk/kernels/flash_attention/{language_stem(target)}.py, copied below unchanged. Sizes are read from the arguments at "
            "trace time; block sizes are requests, fitted to the sequences the kernel is called with.")
    lines = [
        *file_head(f"mk offline author: {what} for {task.name} (target {target}).", text, gpu=gpu, space=tuning),
        "",
        *family_section(gpu_kernel if gpu else tpu_kernel),
        "",
        f"CAUSAL = {causal}",
        f"SCORE_DTYPE = {score_dtype}",
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        f"    ins = {names_tuple(names)}",
        *bound,
        f"    scale = {scale_expr}",
        f"    {to_bhsd(pat)}",
    ]
    if bias:
        lines += [f"    bias = ins[{bias[0]}]", *(f"    {l}" for l in bias_lines)]
    lines += [f"    out = {fn}(q, k, v, {'bias' if bias else 'None'}, scale=scale, causal=CAUSAL, "
              f"score_dtype=SCORE_DTYPE, {cfg_call})",
              f"    return {from_bhsd(pat, 'out')}", ""]
    return "\n".join(lines)


