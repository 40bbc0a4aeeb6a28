"""MLP recogniser: ``act(x @ w1, x @ w2) @ w3`` and ``act(x @ w1) @ w2`` bound to :mod:`mk.kernels.swiglu`.

Applies when the reference is two or three matrix products over the last axis
of its input: a gated MLP (two of the same input ``x`` by two weights of one
shape, then the elementwise gate of the two: SwiGLU's ``silu(g) * u``, GeGLU,
ReGLU ...), an ungated one (one up-projection, any elementwise activation:
ReLU², GELU), or a fused gate-up weight whose product is cut in two halves
(``jnp.split(x @ w, 2, -1)``, Phi-3), each weight read as (in, out) or kept as
(out, in) (``x @ w.T``, PyTorch ports), times a down weight, and nothing after. The gate is the task's own code,
emitted from the jaxpr by :mod:`mk.author.emit`; the kernel is
``mk/kernels/swiglu/{tpu,gpu}.py``, copied verbatim into the written file.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def _matmul(eqn: Any, ins: list[Any], producers: dict[Any, Any], used: set[int]) -> tuple[Any, int, bool]:
    """(lhs var, weight input index, weight kept as (out, in)) of ``lhs @ w`` over lhs's last axis, w a 2-D input
    read as (in, out) or, contracted on its last axis or through ``w.T``, as (out, in). A transpose it reads through
    is added to ``used``."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    a, b = eqn.invars
    if lb or rb or tuple(lc) != (len(a.aval.shape) - 1,) or len(b.aval.shape) != 2 or tuple(rc) not in ((0,), (1,)):
        raise Unsupported("a product that is not x @ w over x's last axis with w a 2-D input")
    transposed = tuple(rc) == (1,)
    t = producers.get(b)
    if b not in ins and t is not None and t.primitive.name == "transpose" and t.invars[0] in ins:
        used.add(id(t))
        b, transposed = t.invars[0], not transposed
    if b not in ins:
        raise Unsupported("a weight of the MLP is computed before its product, not an input")
    return a, ins.index(b), transposed


def _halves(eqns: list[Any], h: Any) -> tuple[Any, Any, set[int]] | None:
    """The two halves of a fused gate-up product ``h`` (..., 2F) as the code splits it (``jnp.split(h, 2, -1)``,
    ``h[..., :F]``): (first, second, the slice eqns), or None when nothing slices ``h``."""
    cuts = [e for e in eqns if any(v is h for v in e.invars)]
    if not any(e.primitive.name in ("slice", "split") for e in cuts):
        return None
    if len(cuts) == 1 and cuts[0].primitive.name == "split":  # jnp.split in one primitive
        (cut,) = cuts
        sizes, axis = tuple(cut.params["sizes"]), cut.params["axis"] % len(h.aval.shape)
        if axis != len(h.aval.shape) - 1 or len(sizes) != 2 or sizes[0] != sizes[1]:
            raise Unsupported(f"the fused up-projection is split into {sizes} along axis {axis}, not two halves of "
                              "its last axis")
        return cut.outvars[0], cut.outvars[1], {id(cut)}
    if len(cuts) != 2 or any(e.primitive.name != "slice" for e in cuts):
        raise Unsupported("the fused up-projection is read other than as two halves of its last axis")
    *lead, two_f = h.aval.shape
    half = two_f // 2
    parts = {}
    for e in cuts:
        start, limit, strides = e.params["start_indices"], e.params["limit_indices"], e.params["strides"]
        if tuple(start[:-1]) != (0,) * len(lead) or tuple(limit[:-1]) != tuple(lead) or (strides and set(strides) != {1}):
            raise Unsupported("the fused up-projection is sliced along more than its last axis")
        parts[(start[-1], limit[-1])] = e
    if set(parts) != {(0, half), (half, two_f)} or two_f % 2:
        raise Unsupported(f"the fused up-projection is cut at {sorted(parts)}, not into two halves")
    first, second = parts[(0, half)], parts[(half, two_f)]
    return first.outvars[0], second.outvars[0], {id(first), id(second)}


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    jaxpr = traced[0].jaxpr.jaxpr
    ins = list(jaxpr.invars)
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    if len(dots) not in (2, 3):
        raise Unsupported(f"an MLP has two or three matrix products (up, optionally gate, down), found {len(dots)}")
    producers = {v: e for e in jaxpr.eqns for v in e.outvars}
    used: set[int] = set()
    ups, (h, wdi, down_t) = [_matmul(d, ins, producers, used) for d in dots[:-1]], _matmul(dots[-1], ins, producers,
                                                                                          used)
    x = ups[0][0]
    if any(u[0] is not x for u in ups) or x not in ins:
        raise Unsupported("the up-projections do not read the same input")
    if len({u[2] for u in ups}) != 1 or (len(ups) == 2 and ins[ups[0][1]].aval.shape != ins[ups[1][1]].aval.shape):
        raise Unsupported("the gate and up weights differ in shape or layout")
    up_t = ups[0][2]
    if len(jaxpr.outvars) != 1 or jaxpr.outvars[0] is not dots[-1].outvars[0]:
        raise Unsupported("work after the down-projection")
    middle = [e for e in jaxpr.eqns if all(e is not d for d in dots) and id(e) not in used]
    pos = {id(e): k for k, e in enumerate(jaxpr.eqns)}
    if any(not pos[id(dots[0])] < pos[id(e)] < pos[id(dots[-1])] for e in middle):
        raise Unsupported("work on the inputs before the products, or after the down-projection")
    names = arg_names(task)
    probes = probes_for(task, traced)
    lead = len(dots[0].outvars[0].aval.shape) - 1
    em = Emitter(lead, probes, taken=set(names) | {v.name for v in probes.vars} | {"g", "u"})
    halves = _halves(middle, dots[0].outvars[0]) if len(dots) == 2 else None
    if halves is not None:
        em.bind(halves[0], "g", True)
        em.bind(halves[1], "u", True)
        middle = [e for e in middle if id(e) not in halves[2]]
        gate_args = "g, u"
    else:
        for d, name in zip(dots[:-1], "gu"):
            em.bind(d.outvars[0], name, True)
        gate_args = "g, u" if len(dots) == 3 else "g"
    em.emit(middle)
    body = em.result([h])
    bad = sorted(p for p in body.primitives if p.startswith(_NOT_ELEMENTWISE))
    if bad:
        raise Unsupported(f"the activation is not elementwise ({', '.join(bad)}): a kernel sees one block of hidden "
                          "units")
    if probes.used(*body.lines, *body.outputs):
        raise Unsupported("the activation depends on the inputs' sizes or static values")
    xi = ins.index(x)
    m = 1
    for n in traced[0].shapes[xi][:-1]:
        m *= n
    w1 = ins[ups[0][1]].aval.shape
    e, f = w1[::-1] if up_t else w1
    f //= 2 if halves is not None else 1
    wd = ins[wdi].aval.shape
    shapes = Shapes(m, e, f, wd[0] if down_t else wd[1], np_dtype(task.args[xi].dtype).itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    layout = Layout(gate_args, halves is not None, up_t, down_t)
    weights = (ups[0][1], ups[1][1] if len(ups) == 2 else None, wdi)
    src = _render(task, names, xi, weights, body, target, tuning, config, dots,
                  dtype_expr(jaxpr.outvars[0].aval.dtype), layout)
    prims = sorted(p for p in body.primitives if not p.startswith("_") and p not in ("pjit", "jit"))
    kind = "gated MLP" if gate_args == "g, u" else "MLP"
    return Proposal(
        name=f"swiglu-{target}",
        source=src,
        rationale=f"{kind} ({m}x{e} -> {f} hidden -> {shapes.d}{layout.describe()}) with the up-projection(s), the "
        f"activation ({', '.join(prims)}) and the down-projection fused per block of hidden units; the hidden "
        "activations never go to HBM",
        template="swiglu",
    )


@dataclass(frozen=True)
class Layout:
    """How the function holds its MLP: the activation's arguments (``"g, u"`` gated, ``"g"`` not), a fused gate-up
    weight cut in two halves, weights kept as (out, in)."""

    gate_args: str
    halves: bool
    up_t: bool
    down_t: bool

    def describe(self) -> str:
        parts = ["a fused gate-up weight"] * self.halves + ["(out, in) weights"] * (self.up_t or self.down_t)
        return f"; {', '.join(parts)}" if parts else ""

    def kwargs(self) -> str:
        on = [k for k in ("halves", "up_t", "down_t") if getattr(self, k)]
        return "".join(f"{k}=True, " for k in on)


def _render(task: Task, names: list[str], xi: int, ws: tuple[int, int | None, int], body: Any, target: str,
            tuning: dict[str, list[Any]], config: dict[str, Any], dots: list[Any], out_dtype: str,
            layout: Layout) -> str:
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    fn = "swiglu_gpu" if gpu else "swiglu_tpu"
    prec = dots[0].params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    inter = dtype_expr(dots[0].outvars[0].aval.dtype)
    x, (wg, wu, wd) = names[xi], (None if i is None else names[i] for i in ws)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    if layout.halves:
        what = f"_gate(*split({x} @ {wg}, 2)) @ {wd}"
    else:
        what = f"_gate({x} @ {wg}, {x} @ {wu}) @ {wd}" if wu else f"_gate({x} @ {wg}) @ {wd}"
    kept = " (weights read in their (out, in) layout)" if layout.up_t or layout.down_t else ""
    text = (f"out = {what}, the activation emitted from the reference, the products "
            f"fused per block of hidden units{kept}. The kernel is mk/kernels/swiglu/{language_stem(target)}.py, copied below unchanged. "
            "Block sizes are requests, fitted to the sizes the kernel is called with"
            + ("; the gate runs in f32 for 16-bit inputs (Triton lowers no 16-bit division)." if gpu else
               f"; the products before the gate are rounded to {inter.split('.')[-1]}, as the reference's are."))
    lines = [
        *file_head(f"mk offline author: fused gated MLP for {task.name} (target {target}).", text, gpu=gpu, space=tuning),
        "",
        *family_section(module),
        "",
        "",
        f"def _gate({layout.gate_args}):",
        '    """The reference between its products, on one block of hidden units."""',
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        f"    lead, e = {x}.shape[:-1], {x}.shape[-1]",
        f"    out = {fn}({x}.reshape(-1, e), {wg}, {wu}, {wd}, activation=_gate, {layout.kwargs()}"
        + ("" if gpu else f"inter_dtype={inter}, ") + f"out_dtype={out_dtype}, precision={prec_expr}, {cfg_call})",
        f"    return out.reshape(*lead, {wd}.shape[{0 if layout.down_t else 1}])",
        "",
    ]
    return "\n".join(lines)
