"""Score-bias attention recogniser: ``softmax(q k^T * scale + bias [causal]) v`` bound to mk.kernels.flash_attention.

FlexAttention's ``score_mod`` of an additive bias (5p's dense learned
per-head table; ALiBi or relative-position tables given as an input): the
flash-attention pattern of :mod:`mk.author.attention` (two batched products,
a row softmax between them, the layout and the scale read from the jaxpr)
with one ``add`` on the scores whose other operand is an input reached
through casts, broadcasts, size-1 reshapes and transposes. That chain is
written as code on the input (the bias stays at its own size: its broadcast
axes are read repeatedly by the kernel, never materialised), and the whole
semantics (scale, bias, causal or full) is checked by running the reference
on a float32 copy of a random case, else the recogniser declines. The kernel
streams the bias block by block with the score tiles; both block schedules of
the family are proposed.
"""

from __future__ import annotations

import numpy as np

from mk.author import attention, score_mod
from mk.author.emit import Unsupported
from mk.author import ir
from mk.author.ir import Op, Program, Val, from_jaxpr
from mk.author.probe import probes_for
from mk.author.proposal import Proposal
from mk.author.trace import Traced, smallest_scale
from mk.kernels.flash_attention import SCHEDULES
from mk.task import Task
from mk.targets import kernel_language


def _chain(v: Val, prod: dict[int, Op]) -> tuple[int, list[str]]:
    """(input index, lines turning ``bias`` (that input) into ``v``'s layout with its size-1 axes kept)."""
    steps: list[str] = []
    while v.arg is None:
        op = prod.get(id(v))
        if op is None:
            raise Unsupported("the score bias is not computed from an input")
        x = op.ins[0]
        if op.prim == "convert_element_type":
            pass  # the kernel rounds the bias as the scores are rounded
        elif op.prim == "transpose":
            steps.append(f"bias = jnp.transpose(bias, {tuple(op.params['permutation'])!r})")
        elif op.prim == "broadcast_in_dim":
            dims = tuple(op.params["broadcast_dimensions"])
            if list(dims) != sorted(dims):
                raise Unsupported("the score bias is broadcast with its axes reordered")
            new = tuple(i for i in range(len(v.shape)) if i not in dims)
            if new:
                steps.append(f"bias = lax.expand_dims(bias, {new!r})")
        elif op.prim == "reshape":
            src, dst = [d for d in x.shape if d != 1], [d for d in v.shape if d != 1]
            if src != dst:
                raise Unsupported("the score bias is reshaped across axes")
            steps.append(score_mod.size_one_reshape(x.shape, v.shape, "bias"))
        else:
            raise Unsupported(f"the score bias is computed by {op.prim!r}: the kernel takes an input bias")
        v = x
    return v.arg, steps[::-1]


def find_bias(prog: Program, pat: attention.AttentionPattern) -> tuple[int, list[str]]:
    """The one additive score bias between the two products: (input index, lines making it rank 4)."""
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    prod = prog.producers()
    scores = prog.ops[dots[0]].out
    found = []
    for op in prog.ops[dots[0] + 1:dots[1]]:
        if op.prim not in ("add", "add_any") or len(op.ins) != 2:
            continue
        on_scores = [ir.derives(x, {id(scores)}, prod) for x in op.ins]
        if on_scores.count(True) != 1:
            continue
        other = op.ins[on_scores.index(False)]
        if other.is_const:
            continue
        found.append(_chain(other, prod))
    if not found:
        raise Unsupported("no additive score bias from an input between the two products")
    if len(found) > 1:
        raise Unsupported("more than one additive term on the scores")
    arg, steps = found[0]
    if arg in (pat.q, pat.k, pat.v):
        raise Unsupported("the score bias is computed from q, k or v")
    if len(prog.args[arg].shape) > 4:
        raise Unsupported("the score bias has more than four axes")
    if not any(s.startswith("bias = lax.expand_dims") for s in steps) and len(prog.args[arg].shape) < 4:
        steps.append("bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)")
    return arg, steps


def _bias_of(arg: int, steps: list[str]):
    def make(xs):
        import jax.numpy as jnp
        from jax import lax

        ns = {"jnp": jnp, "lax": lax, "bias": jnp.asarray(xs[arg])}
        for line in steps:
            exec(line, ns)  # noqa: S102 - lines this module wrote from the jaxpr
        return np.asarray(ns["bias"], np.float64)

    return make


def propose(task: Task, traced: list[Traced], target: str) -> list[Proposal]:
    if not kernel_language(target):
        raise Unsupported(f"the score-bias attention recogniser writes Pallas TPU and GPU kernels, not {target!r}")
    t0 = traced[0]
    prog = from_jaxpr(t0.jaxpr)
    pat = attention.recognise(prog)
    arg, steps = find_bias(prog, pat)
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    attention.plain_ops(prog, dots[0], dots[1], frozenset({"add", "add_any"}))
    for t in traced[1:]:
        other_prog = from_jaxpr(t.jaxpr)
        other = attention.recognise(other_prog)
        if (other.layout, other.out_layout, other.q, other.k, other.v) != (pat.layout, pat.out_layout, pat.q, pat.k, pat.v) \
                or find_bias(other_prog, other) != (arg, steps):
            raise Unsupported("the attention layout or its bias changes between scales")
    causal = attention._causal(task, smallest_scale(traced), pat, _bias_of(arg, steps), what="softmax attention with an additive "
                               f"bias from {task.args[arg].name}")
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    if not causal and any(op.prim == "select_n" for op in prog.ops[dots[0]:dots[1]]):
        raise Unsupported("the scores are masked, but not causally: the kernel has no general mask")
    score_dtype = attention._score_dtype(attention._scores_dtype(prog, prog.ops[dots[0]]))
    probes = probes_for(task, traced)
    attention.same_mask_everywhere(probes, causal)
    scale_expr = attention._scale_expr(probes, pat, prog.ops[dots[0]].out.dtype)
    name = task.args[arg].name
    kind = f"{'causal' if causal else 'full'}, {'GQA' if pat.group > 1 else 'MHA'}, scale {scale_expr}, + {name}"
    return [Proposal(name=f"flex-attention-{target}" + ("" if schedule == "online" else f"-{schedule}"),
                     source=attention.render(task, t0, pat, probes, target, schedule, causal=causal,
                                             scale_expr=scale_expr, score_dtype=score_dtype, bias=(arg, steps),
                                             what="attention with an additive score bias"),
                     rationale=f"flash attention with an additive score bias ({kind}) streamed block by block with "
                     f"the score tiles, {attention.plan(target, schedule, causal)}", template="flex_attention")
            for schedule in SCHEDULES]
