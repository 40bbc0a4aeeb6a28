"""MLP recogniser: ``act(x @ w1, x @ w2) @ w3`` and ``act(x @ w1) @ w2`` bound to :mod:`mk.kernels.swiglu`.

Applies when the reference is two or three matrix products over the last axis
of its input: a gated MLP (two of the same input ``x`` by two weights of one
shape, then the elementwise gate of the two: SwiGLU's ``silu(g) * u``, GeGLU,
ReGLU ...), an ungated one (one up-projection, any elementwise activation:
ReLU², GELU), or a fused gate-up weight whose product is cut in two halves
(``jnp.split(x @ w, 2, -1)``, Phi-3), each weight read as (in, out) or kept as
(out, in) (``x @ w.T``, PyTorch ports), times a down weight. The activation may
read vectors over the hidden units (the up-projections' biases) and elementwise
work may follow the down-projection (its bias, a residual, a cast): both run
inside the kernel, on each block, with their inputs' blocks. An input flattened
to 2-D before the products and reshaped back after (HF's Conv1D) is the
kernel's own flattening. The gate is the task's own code,
emitted from the jaxpr by :mod:`mk.author.emit`; the kernel is
``mk/kernels/swiglu/{tpu,gpu}.py``, copied verbatim into the written file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import jax.numpy as jnp
from jax import lax

from mk.author import prologue
from mk.author.emit import dtype_expr, Emitter, family_section, file_head, language_stem, body_helpers, Unsupported
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.kernels.swiglu import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec

#: names the written file defines or ``kernel`` binds: an input so named would be shadowed
_LOCALS = frozenset({"_lead", "_e", "_d", "_out", "_g", "_u", "_y", "_rows", "_gate", "_epilogue", "_prologue", "_erf",
                     "_masked", "swiglu_tpu", "swiglu_gpu", "jax", "jnp", "lax", "pl", "pltpu", "pltriton", "functools",
                     "math", "CONFIG_SPACE"})

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


def _rounded(body: Any, em: Emitter, eqns: list[Any]) -> None:
    """Round each 16-bit step of the activation as the reference does, in place: the Triton kernel runs it in float32
    (Triton lowers no 16-bit division), and a bf16 LLaMA MLP whose output cancels to a small sum was outside the
    judge's bf16 tolerance at fresh seeds with the steps unrounded."""
    narrow = {}
    stack = list(eqns)
    while stack:
        e = stack.pop()
        sub = e.params.get("jaxpr") or e.params.get("call_jaxpr") or e.params.get("fun_jaxpr")
        if sub is not None:  # an inlined function (jax.nn.sigmoid): its own steps
            stack.extend(getattr(sub, "jaxpr", sub).eqns)
        for o in e.outvars:
            kind = np.dtype(o.aval.dtype)
            if kind.itemsize < 4 and kind.kind in "fV" and o in em._names:
                narrow[em._names[o]] = dtype_expr(kind)
    lines = []
    for line in body.lines:
        lines.append(line)
        name = line.split(" = ", 1)[0]
        if name in narrow:
            lines.append(f"{name} = {name}.astype({narrow[name]}).astype(jnp.float32)")
    body.lines[:] = lines


def _unflattened(v: Any, producers: dict[Any, Any], ins: list[Any], used: set[int]) -> tuple[Any, bool]:
    """(the input, True) when ``v`` is an input with its leading axes collapsed (``x.reshape(-1, e)``, HF's Conv1D:
    the kernel collapses them too), else (``v``, False)."""
    e = producers.get(v)
    if e is not None and e.primitive.name == "reshape" and e.invars[0] in ins:
        src, dst = tuple(e.invars[0].aval.shape), tuple(v.aval.shape)
        if len(dst) == 2 and src and src[-1] == dst[-1] and math.prod(src[:-1]) == dst[0]:
            used.add(id(e))
            return e.invars[0], True
    return v, False


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


def _sides(em: Emitter, eqns: list[Any], ins: list[Any], skip: set[Any], names: list[str], width: int,
           rows: tuple[int, ...] | None, what: str) -> list[Side]:
    """Bind each input ``eqns`` read (other than ``skip``) as a side: a vector over the block's last axis (``width``:
    a bias, any rank with leading ones) or, where ``rows`` is given, a value of the output's own shape (a
    residual)."""
    from jax._src.core import Literal

    found: list[Side] = []
    for e in eqns:
        for v in e.invars:
            if isinstance(v, Literal) or v not in ins or v in skip or any(s.index == ins.index(v) for s in found):
                continue
            shape = tuple(v.aval.shape)
            if shape and shape[-1] == width and all(n == 1 for n in shape[:-1]) and len(shape) > 2:
                raise Unsupported(f"{what} reads a vector of rank {len(shape)} {shape}: a bias of rank 1 or 2 only")
            if shape and shape[-1] == width and all(n == 1 for n in shape[:-1]):
                found.append(Side(ins.index(v), "col", len(shape)))
                em.bind(v, names[ins.index(v)], False)
            elif rows is not None and shape == rows:
                found.append(Side(ins.index(v), "tile", len(shape)))
                em.bind(v, names[ins.index(v)], True)
            else:
                raise Unsupported(f"{what} reads an input of shape {shape}, not a vector of {width} (a bias)"
                                  + (f" or a value shaped like the output {rows}" if rows is not None else ""))
    return found


@dataclass(frozen=True)
class Side:
    """An input the activation or the epilogue reads: ``col`` a vector over the block's last axis (passed to the
    kernel as (1, n), seen at its own ``rank``), ``tile`` a value shaped like the output (passed as (M, D))."""

    index: int
    kind: str
    rank: int


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
    if any(u[0] is not x for u in ups):
        raise Unsupported("the up-projections do not read the same input")
    x, flat = _unflattened(x, producers, ins, used)
    names = arg_names(task)
    probes = probes_for(task, traced)
    taken = set(names) | {v.name for v in probes.vars} | {"_g", "_u", "_y"}
    pro = None
    if x not in ins:  # a norm of the input first: its own whole-rows kernel (mk.author.prologue)
        try:
            pro = prologue.find(jaxpr, x, names, probes, target, taken)
        except Unsupported as exc:
            raise Unsupported(f"the up-projections read a value computed from the inputs, not an input, and not row "
                              f"by row from one: {exc}") from exc
        used |= {id(e) for e in pro.eqns}
        if set(names) & prologue.NAMES:
            raise Unsupported("an input is named like a function of the written prologue")
    if not all(jnp.issubdtype(d.outvars[0].aval.dtype, jnp.floating) for d in dots):
        raise Unsupported("an integer matrix product (the kernels accumulate in float32)")
    clash = set(names) & (_LOCALS | set(default(kernel_spec(target), Shapes(8, 128, 128, 128)).kwargs(target)))
    if clash:
        raise Unsupported(f"an input is named like a name of the written kernel: {sorted(clash)}")
    if len({u[2] for u in ups}) != 1 or (len(ups) == 2 and ins[ups[0][1]].aval.shape != ins[ups[1][1]].aval.shape):
        raise Unsupported("the gate and up weights differ in shape or layout")
    up_t = ups[0][2]
    if len(jaxpr.outvars) != 1:
        raise Unsupported("the MLP template writes one output")
    final = jaxpr.outvars[0]
    back = producers.get(final)
    if flat and back is not None and back.primitive.name == "reshape" and \
            tuple(final.aval.shape[:-1]) == tuple(x.aval.shape[:-1]) and len(back.invars[0].aval.shape) == 2:
        used.add(id(back))  # the output reshaped back to the input's leading axes: the kernel's own reshape
        final = back.invars[0]
    elif flat and len(x.aval.shape) != 2:
        raise Unsupported("the input is flattened to rows and the output left flat: the kernel restores the input's "
                          "leading axes")
    up_outs = {id(d.outvars[0]) for d in dots[:-1]}
    middle = [e for e in prologue.feeding(jaxpr.eqns, h, producers, up_outs) if id(e) not in used]
    if any(e in dots[:-1] for e in middle) or producers.get(h) is None and h not in ins:
        raise Unsupported("the down-projection does not read the activation of the up-projections")
    reads = {id(v) for e in middle for v in e.invars}
    if not up_outs <= reads | {id(h)}:
        raise Unsupported("an up-projection is not read by the activation")
    taken_ids = {id(e) for e in middle} | {id(d) for d in dots} | used
    tail = [e for e in jaxpr.eqns if id(e) not in taken_ids]
    lead = len(dots[0].outvars[0].aval.shape) - 1
    em = Emitter(lead, probes, taken=taken)
    halves = _halves(middle, dots[0].outvars[0]) if len(dots) == 2 else None
    if halves is not None:
        em.bind(halves[0], "_g", True)
        em.bind(halves[1], "_u", True)
        middle = [e for e in middle if id(e) not in halves[2]]
        gate_args = ["_g", "_u"]
    else:
        for d, name in zip(dots[:-1], ("_g", "_u")):
            em.bind(d.outvars[0], name, True)
        gate_args = ["_g", "_u"] if len(dots) == 3 else ["_g"]
    w1 = ins[ups[0][1]].aval.shape
    e_dim, f = w1[::-1] if up_t else w1
    f //= 2 if halves is not None else 1
    weights = {ins[ups[0][1]], ins[wdi]} | ({ins[ups[1][1]]} if len(ups) == 2 else set()) | ({x} if pro is None
                                                                                           else set())
    hidden = _sides(em, middle, ins, weights, names, f, None, "the activation")
    em.emit(middle)
    body = em.result([h])
    if kernel_language(target) == "triton" and np.dtype(dots[0].outvars[0].aval.dtype).itemsize < 4:
        _rounded(body, em, middle)
    out_shape = tuple(dots[-1].outvars[0].aval.shape)
    epi = Emitter(lead, probes, taken=taken)
    epi.bind(dots[-1].outvars[0], "_y", True)
    outs = _sides(epi, tail, ins, set(), names, out_shape[-1], out_shape, "the work after the down-projection")
    made = {id(dots[-1].outvars[0])} | {id(o) for e in tail for o in e.outvars}
    if any(id(v) not in made and v not in ins for e in tail for v in e.invars if hasattr(v, "aval") and
           not type(v).__name__ == "Literal"):
        raise Unsupported("the work after the down-projection reads a value from before it")
    epi.emit(tail)
    epilogue = epi.result([final]) if tail else None
    if epilogue is None and final is not dots[-1].outvars[0]:
        raise Unsupported("the output is not the down-projection")
    for part, what in ((body, "the activation"), (epilogue, "the work after the down-projection")):
        if part is None:
            continue
        bad = sorted(p for p in part.primitives if p.startswith(_NOT_ELEMENTWISE))
        if bad:
            raise Unsupported(f"{what} is not elementwise ({', '.join(bad)}): a kernel sees one block of it")
        if probes.used(*part.lines, *part.outputs):
            raise Unsupported(f"{what} depends on the inputs' sizes or static values")
    if epilogue is not None and tuple(final.aval.shape) != out_shape:
        raise Unsupported("the work after the down-projection changes the output's shape")
    xi = ins.index(x) if pro is None else pro.row
    m = 1
    for n in traced[0].shapes[xi][:-1]:
        m *= n
    wd = ins[wdi].aval.shape
    shapes = Shapes(m, e_dim, f, wd[0] if down_t else wd[1], np.dtype(dots[0].invars[0].aval.dtype).itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    layout = Layout(", ".join(gate_args + [names[s.index] for s in hidden]), halves is not None, up_t, down_t)
    ws = (ups[0][1], ups[1][1] if len(ups) == 2 else None, wdi)
    src = _render(task, names, xi, ws, body, target, tuning, config, dots, dtype_expr(jaxpr.outvars[0].aval.dtype),
                  layout, hidden, outs, epilogue, pro, traced)
    prims = sorted(p for p in body.primitives if not p.startswith("_") and p not in ("pjit", "jit"))
    kind = "gated MLP" if len(gate_args) == 2 else "MLP"
    after = "" if epilogue is None else (
        f", and what follows it ({', '.join(sorted(p for p in epilogue.primitives if not p.startswith('_')))})")
    return Proposal(
        name=f"swiglu-{target}",
        source=src,
        rationale=f"{kind} ({m}x{e_dim} -> {f} hidden -> {shapes.d}{layout.describe()}) with the up-projection(s), "
        f"the activation ({', '.join(prims)}), the down-projection{after} fused per block of hidden units; the "
        "hidden activations never go to HBM",
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
            layout: Layout, hidden: list[Side], outs: list[Side], epilogue: Any, pro: prologue.Prologue | None,
            traced: list[Traced]) -> str:
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    fn = "swiglu_gpu" if gpu else "swiglu_tpu"
    prec = dots[0].params.get("precision")
    # a float32 MLP's products at HIGHEST, as the judge runs the reference (one bf16 pass otherwise, on a TPU)
    prec_expr = "lax.Precision.HIGHEST" if np.dtype(dots[0].invars[0].aval.dtype) == np.float32 else "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        if not isinstance(first, lax.Precision):
            raise Unsupported(f"a product's precision {first!r} is not a lax.Precision the kernels take")
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    inter = dtype_expr(dots[0].outvars[0].aval.dtype)
    x, (wg, wu, wd) = names[xi] if pro is None else "_rows", (None if i is None else names[i] for i in ws)
    before: list[str] = []
    head: list[str] = []
    if pro is not None:
        from mk.kernels.rowwise import gpu as rw_gpu, tpu as rw_tpu

        shapes = [traced[0].shapes[pro.row], tuple(pro.out.aval.shape)]
        sizes = [np_dtype(task.args[pro.row].dtype).itemsize, np.dtype(pro.out.aval.dtype).itemsize]
        before = prologue.call_lines(pro, names, target, shapes, sizes, "_rows")
        head = [*family_section(rw_gpu if gpu else rw_tpu), "", "", *prologue.body_lines(pro, names), "", ""]
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    if layout.halves:
        what = f"_gate(*split({x} @ {wg}, 2)) @ {wd}"
    else:
        what = f"_gate({x} @ {wg}, {x} @ {wu}) @ {wd}" if wu else f"_gate({x} @ {wg}) @ {wd}"
    kept = " (weights read in their (out, in) layout)" if layout.up_t or layout.down_t else ""
    if pro is not None:
        kept += ("; the reference's row-wise work before the products (a norm) runs first as its own whole-rows "
                 "kernel, mk/kernels/rowwise, copied below unchanged")
    text = (f"out = {what}, the activation emitted from the reference, the products "
            f"fused per block of hidden units{kept}. The kernel is mk/kernels/swiglu/{language_stem(target)}.py, copied below unchanged. "
            "Block sizes are requests, fitted to the sizes the kernel is called with"
            + ("; the gate runs in f32 for 16-bit inputs (Triton lowers no 16-bit division)." if gpu else
               f"; the products before the gate are rounded to {inter.split('.')[-1]}, as the reference's are."))
    lines = [
        *file_head(f"mk offline author: fused gated MLP for {task.name} (target {target}).", text, gpu=gpu, space=tuning,
                   imports=["import math"] if pro is not None else []),
        "",
        *family_section(module),
        "",
        "",
        *head,
        *body_helpers(body, epilogue, None if pro is None else pro.body),
        f"def _gate({layout.gate_args}):",
        '    """The reference between its products, on one block of hidden units."""',
        *_at_rank(hidden, names),
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        *([] if epilogue is None else [
            f"def _epilogue({', '.join(['_y'] + [names[s.index] for s in outs])}):",
            '    """The reference after its down-projection, on one output block."""',
            *_at_rank(outs, names),
            *[f"    {l}" for l in epilogue.lines],
            f"    return {epilogue.outputs[0]}",
            "",
            ""]),
        f"def kernel({signature(task, cfg_sig)}):",
        *before,
        f"    _lead, _e = {x}.shape[:-1], {x}.shape[-1]",
        f"    _d = {wd}.shape[{0 if layout.down_t else 1}]",
        f"    _out = {fn}({x}.reshape(-1, _e), {wg}, {wu}, {wd}, activation=_gate, {layout.kwargs()}"
        + _side_args(hidden, outs, names, epilogue is not None, dtype_expr(dots[-1].outvars[0].aval.dtype))
        + (f"product_dtype={inter}, " if gpu else f"inter_dtype={inter}, ")
        + f"out_dtype={out_dtype}, precision={prec_expr}, {cfg_call})",
        "    return _out.reshape(*_lead, _d)",
        "",
    ]
    return "\n".join(lines)


def _at_rank(sides: list[Side], names: list[str]) -> list[str]:
    """Lines giving each vector side the rank the reference reads it at (the kernel passes (1, n) blocks)."""
    out = []
    for s in sides:
        if s.kind == "col" and s.rank != 2:
            shape = "-1" if s.rank == 1 else ", ".join(["1"] * (s.rank - 1) + ["-1"])
            out.append(f"    {names[s.index]} = {names[s.index]}.reshape({shape})")
    return out


def _side_args(hidden: list[Side], outs: list[Side], names: list[str], epilogue: bool, down_dtype: str) -> str:
    """The kernel call's side arguments: vectors as (1, n), values shaped like the output as (M, D)."""
    def arg(s: Side) -> str:
        return f"{names[s.index]}.reshape(1, -1)" if s.kind == "col" else f"{names[s.index]}.reshape(-1, _d)"

    text = ""
    if hidden:
        text += f"hidden_sides=({''.join(arg(s) + ', ' for s in hidden)}), "
    if outs:
        text += f"out_sides=({''.join(arg(s) + ', ' for s in outs)}), "
    if epilogue:
        text += "epilogue=_epilogue, "
    return text + f"down_dtype={down_dtype}, "
