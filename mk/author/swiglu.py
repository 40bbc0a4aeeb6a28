"""Gated-MLP recogniser: ``act(x @ w1, x @ w2) @ w3`` bound to :mod:`mk.kernels.swiglu`.

Applies when the reference is three matrix products over the last axis of
its input: two of the same input ``x`` by two weights of one shape, then the
elementwise gate of the two (SwiGLU's ``silu(g) * u``, GeGLU, ReGLU ...)
times a third weight, and nothing after. The gate is the task's own code,
emitted from the jaxpr by :mod:`mk.author.emit`; the kernel is
``mk/kernels/swiglu/{tpu,gpu}.py``, copied verbatim into the written file.
"""

from __future__ import annotations

from typing import Any

from mk.author.emit import dtype_expr, Emitter, family_section, file_head, language_stem, Unsupported
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.kernels.swiglu import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec

#: what a gate on a block of hidden units may do: elementwise work only (a reduction would see one block)
_NOT_ELEMENTWISE = ("reduce_", "argm", "cum", "reshape", "transpose", "squeeze", "expand_dims", "dot_general", "sort")


def _matmul(eqn: Any, ins: list[Any]) -> tuple[Any, int]:
    """(lhs var, weight input index) of ``lhs @ w`` over lhs's last axis, w a 2-D input."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    a, b = eqn.invars
    if lb or rb or tuple(lc) != (len(a.aval.shape) - 1,) or tuple(rc) != (0,) or len(b.aval.shape) != 2 or b not in ins:
        raise Unsupported("a product that is not x @ w over x's last axis with w a 2-D input")
    return a, ins.index(b)


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    jaxpr = traced[0].jaxpr.jaxpr
    ins = list(jaxpr.invars)
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    if len(dots) != 3:
        raise Unsupported(f"a gated MLP has three matrix products, found {len(dots)}")
    (x1, w1), (x2, w2), (h, w3) = (_matmul(d, ins) for d in dots)
    if x1 is not x2 or x1 not in ins:
        raise Unsupported("the two up-projections do not read the same input")
    if ins[w1].aval.shape != ins[w2].aval.shape:
        raise Unsupported("the gate and up weights differ in shape")
    if len(jaxpr.outvars) != 1 or jaxpr.outvars[0] is not dots[2].outvars[0]:
        raise Unsupported("work after the down-projection")
    middle = [e for e in jaxpr.eqns if all(e is not d for d in dots)]
    pos = {id(e): k for k, e in enumerate(jaxpr.eqns)}
    if any(not pos[id(dots[0])] < pos[id(e)] < pos[id(dots[2])] for e in middle):
        raise Unsupported("work on the inputs before the products, or after the down-projection")
    names = arg_names(task)
    probes = probes_for(task, traced)
    lead = len(dots[0].outvars[0].aval.shape) - 1
    em = Emitter(lead, probes, taken=set(names) | {v.name for v in probes.vars} | {"g", "u"})
    em.bind(dots[0].outvars[0], "g", True)
    em.bind(dots[1].outvars[0], "u", True)
    em.emit(middle)
    body = em.result([h])
    bad = sorted(p for p in body.primitives if p.startswith(_NOT_ELEMENTWISE))
    if bad:
        raise Unsupported(f"the gate is not elementwise ({', '.join(bad)}): a kernel sees one block of hidden units")
    used = probes.used(*body.lines, *body.outputs)
    if used:
        raise Unsupported("the gate depends on the inputs' sizes or static values")
    x_shape = traced[0].shapes[ins.index(x1)]
    m = 1
    for n in x_shape[:-1]:
        m *= n
    e, f = ins[w1].aval.shape
    shapes = Shapes(m, e, f, ins[w3].aval.shape[1], np_dtype(task.args[ins.index(x1)].dtype).itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    src = _render(task, names, ins.index(x1), (w1, w2, w3), body, target, tuning, config, dots,
                  dtype_expr(jaxpr.outvars[0].aval.dtype))
    prims = sorted(p for p in body.primitives if not p.startswith("_") and p not in ("pjit", "jit"))
    return Proposal(
        name=f"swiglu-{target}",
        source=src,
        rationale=f"gated MLP ({m}x{e} -> {f} hidden -> {shapes.d}) with both up-projections, the gate "
        f"({', '.join(prims)}) and the down-projection fused per block of hidden units; the hidden activations "
        "never go to HBM",
        template="swiglu",
    )


def _render(task: Task, names: list[str], xi: int, ws: tuple[int, int, int], body: Any, target: str,
            tuning: dict[str, list[Any]], config: dict[str, Any], dots: list[Any], out_dtype: str) -> str:
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    fn = "swiglu_gpu" if gpu else "swiglu_tpu"
    prec = dots[0].params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    inter = dtype_expr(dots[0].outvars[0].aval.dtype)
    x, (wg, wu, wd) = names[xi], (names[i] for i in ws)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    text = (f"out = _gate({x} @ {wg}, {x} @ {wu}) @ {wd}, the gate emitted from the reference, the three products "
            f"fused per block of hidden units. The kernel is mk/kernels/swiglu/{language_stem(target)}.py, copied below unchanged. "
            "Block sizes are requests, fitted to the sizes the kernel is called with"
            + ("; the gate runs in f32 for 16-bit inputs (Triton lowers no 16-bit division)." if gpu else
               f"; the products before the gate are rounded to {inter.split('.')[-1]}, as the reference's are."))
    lines = [
        *file_head(f"mk offline author: fused gated MLP for {task.name} (target {target}).", text, gpu=gpu, space=tuning),
        "",
        *family_section(module),
        "",
        "",
        "def _gate(g, u):",
        '    """The reference between its products, on one block of hidden units."""',
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        f"    lead, e = {x}.shape[:-1], {x}.shape[-1]",
        f"    out = {fn}({x}.reshape(-1, e), {wg}, {wu}, {wd}, activation=_gate, "
        + ("" if gpu else f"inter_dtype={inter}, ") + f"out_dtype={out_dtype}, precision={prec_expr}, {cfg_call})",
        f"    return out.reshape(*lead, {wd}.shape[1])",
        "",
    ]
    return "\n".join(lines)
