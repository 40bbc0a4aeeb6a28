"""Convolution recogniser: one ``conv_general_dilated`` and the work after it, bound to :mod:`mk.kernels.conv`.

Applies when the reference is a single stride-1, undilated, ungrouped
convolution (1-3 spatial axes, any padding, operands reaching it through
transposes and casts from two inputs) followed by per-sample work on its
output: bias, activations, norms whose statistics stay inside one sample
(InstanceNorm, GroupNorm, LayerNorm), pooling over the sample, reductions over
channels. That work is the *epilogue*: emitted from the jaxpr by
:mod:`mk.author.emit` and run on each finished tile, so the convolution's output
never goes to HBM. The kernel itself is not generated: the written file carries
``mk/kernels/conv/{tpu,gpu}.py`` verbatim and calls it. Statistics across
samples (training-mode BatchNorm) split the epilogue: the kernel fuses the
per-sample part before the first of them, and the rest runs after the kernel
on its output, as whole-array JAX (XLA fuses it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from mk.author.emit import MASKED_HELPER, Emitter, Unsupported, dtype_expr, family_section, file_head, module_body
from mk.author.groups import GroupEmitter, helpers
from mk.author.pooling import PoolEmitter
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.split import split_epilogue, whole_epilogue
from mk.author.trace import Traced
from mk.kernels.conv import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language

#: the chip whose facts the written kernel's default tiling reads (mk.hardware.DEFAULT_SPECS)
CHIPS = {"tpu": "v6e", "gpu": "h200"}


@dataclass(frozen=True)
class Operand:
    index: int  # the task input feeding it
    casts: tuple[str, ...]  # dtype names applied in order
    axes: tuple[int, ...]  # operand axis i is axis axes[i] of the input


def _trace_back(var: Any, producers: dict[Any, Any], invars: list[Any], used: set[int]) -> Operand:
    casts: list[str] = []
    axes = list(range(len(var.aval.shape)))
    while var not in invars:
        eqn = producers.get(var)
        if eqn is None:
            raise Unsupported("a convolution operand is not an input")
        used.add(id(eqn))
        if eqn.primitive.name == "convert_element_type":
            casts.append(str(eqn.params["new_dtype"]))
        elif eqn.primitive.name == "transpose":
            perm = tuple(eqn.params["permutation"])
            axes = [perm[a] for a in axes]
        else:
            raise Unsupported(f"a convolution operand is computed by {eqn.primitive.name!r} before the convolution")
        var = eqn.invars[0]
    return Operand(invars.index(var), tuple(reversed(casts)), tuple(axes))


def _conv_eqn(jaxpr: Any) -> Any:
    convs = [e for e in jaxpr.eqns if e.primitive.name == "conv_general_dilated"]
    if len(convs) != 1:
        raise Unsupported(f"the conv template needs exactly one top-level convolution, found {len(convs)}")
    if any(e.primitive.name == "dot_general" for e in jaxpr.eqns):
        raise Unsupported("a matrix product beside the convolution")
    conv = convs[0]
    p = conv.params
    s = len(p["window_strides"])
    if not 1 <= s <= 3:
        raise Unsupported(f"a convolution with {s} spatial axes (1-3 are supported)")
    if any(v != 1 for v in (*p["window_strides"], *p["lhs_dilation"], *p["rhs_dilation"])):
        raise Unsupported("a strided or dilated convolution (transposed convolutions included)")
    if p["feature_group_count"] != 1 or p["batch_group_count"] != 1:
        raise Unsupported("a grouped or depthwise convolution")
    if any(lo < 0 or hi < 0 for lo, hi in p["padding"]):
        raise Unsupported("negative padding")
    dn = p["dimension_numbers"]
    if tuple(dn.out_spec) != (0, s + 1, *range(1, s + 1)):
        raise Unsupported("the convolution's output is not channels-last (N, *spatial, C)")
    return conv


def propose(task: Task, traced: list[Traced], target: str) -> list[Proposal]:
    t0 = traced[0]
    jaxpr = t0.jaxpr.jaxpr
    if jaxpr.constvars:
        raise Unsupported("the reference closes over array constants")
    conv = _conv_eqn(jaxpr)
    s = len(conv.params["window_strides"])
    dn = conv.params["dimension_numbers"]
    producers = {o: e for e in jaxpr.eqns for o in e.outvars}
    used: set[int] = {id(conv)}
    invars = list(jaxpr.invars)
    lhs = _trace_back(conv.invars[0], producers, invars, used)
    rhs = _trace_back(conv.invars[1], producers, invars, used)
    if lhs.index == rhs.index:
        raise Unsupported("one input is both the image and the window")
    x_perm = tuple(lhs.axes[a] for a in (dn.lhs_spec[0], *dn.lhs_spec[2:], dn.lhs_spec[1]))
    w_perm = tuple(rhs.axes[a] for a in (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0]))
    if len(jaxpr.outvars) != 1:
        raise Unsupported("the conv template writes one output")
    probes = probes_for(task, traced)
    names = arg_names(task)
    defined = _defined(target)
    if set(names) & defined:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & defined)}")
    params = [i for i in range(len(invars)) if i not in (lhs.index, rhs.index)]
    clash = ({"y", "tail", "epilogue"} & set(names)) | ({"x", "w"} & {names[i] for i in params})
    if clash:
        raise Unsupported(f"an input is named like a local of the written kernel: {sorted(clash)}")
    for i in params:
        if not invars[i].aval.shape:
            raise Unsupported(f"input {names[i]!r} is a scalar array (the kernel passes arrays as VMEM blocks)")
    epilogue = [e for e in jaxpr.eqns if id(e) not in used]
    gpu = kernel_language(target) == "triton"
    taken = set(names) | {v.name for v in probes.vars} | defined | {"acc", "tile", "y", "tail", "epilogue", "x", "w"}

    def emitter() -> Emitter:
        em = GroupEmitter(1, probes, taken=taken) if gpu else PoolEmitter(1, probes, taken=taken)
        em.bind(conv.outvars[0], "acc", True)
        for i in params:
            em.bind(invars[i], names[i], False)
        return em

    parts = split_epilogue(emitter, epilogue, list(jaxpr.outvars), [(invars[i], names[i]) for i in params], probes,
                           taken)
    body, tail, kernel_out = parts.body, parts.tail, parts.kernel_out
    peers = probes.peers(conv)
    batch = _size(probes, [e.outvars[0].aval.shape[0] for e in peers])
    cout = _size(probes, [e.outvars[0].aval.shape[-1] for e in peers])
    if tail is None:
        out_lead = _size(probes, [t.jaxpr.jaxpr.outvars[0].aval.shape[0] for t in probes.traces])
        if not jaxpr.outvars[0].aval.shape or out_lead != batch:
            raise Unsupported("the output's leading axis is not the batch (the work after the convolution mixes "
                              "samples)")
    groups = _channel_groups(parts.emitter.split, cout, kernel_out, jaxpr, probes)
    channel_axes = []
    for i in params:
        sizes = [_size(probes, [t.shapes[i][k] for t in probes.traces]) for k in range(len(invars[i].aval.shape))]
        channel_axes.append(tuple(k for k, z in enumerate(sizes) if z == cout))
        if gpu and any(z not in ("1", cout) for z in sizes):
            raise Unsupported(f"input {names[i]!r} has an axis that is neither 1 nor the output channels (Triton "
                              "pads only the channel axis of an epilogue input)")
    conv_shapes = Shapes.of(tuple(conv.invars[0].aval.shape), tuple(conv.invars[1].aval.shape),
                            np_dtype(task.args[lhs.index].dtype).itemsize, fused_epilogue=True)
    tuning = space(target, conv_shapes)
    cfg = default(CHIPS[target], conv_shapes).kwargs(target)
    config = {k: (cfg[k] if cfg[k] in v else v[0]) for k, v in tuning.items()}
    src = _render(task, names, probes.used(*body.lines, *body.outputs), body, target, conv, lhs, rhs, x_perm,
                  w_perm, params, channel_axes, tuning, config, dtype_expr(kernel_out.aval.dtype), tail,
                  probes.used(*tail.lines, *tail.outputs) if tail else [], groups)
    prims = sorted(p for p in body.primitives if not p.startswith("_"))
    fused = Proposal(
        name=f"conv-epilogue-{target}",
        source=src,
        rationale=f"{s}-D convolution as an implicit GEMM (window {tuple(conv.invars[1].aval.shape[:s])}, "
        f"{conv.invars[0].aval.shape[-1]} -> {conv.outvars[0].aval.shape[-1]} channels) with the epilogue fused "
        f"per sample ({', '.join(prims) or 'none'}); the convolution's output never goes back to HBM"
        + ("" if tail is None else "; the statistics across samples (and what follows them) run after the kernel in "
           "XLA, on its output"),
        template="conv",
    )
    unfused = _unfused(task, names, target, conv, lhs, rhs, x_perm, w_perm, params, epilogue, jaxpr, probes, taken,
                       np_dtype(task.args[lhs.index].dtype).itemsize)
    return [fused] if unfused is None else [fused, unfused]


def _channel_groups(split: tuple[str, str, str] | None, cout: str, kernel_out: Any, jaxpr: Any,
                    probes: Any) -> tuple[str, str] | None:
    """(groups, group size) as the kernel reads them from its arguments, when the epilogue splits the channels
    into groups on a padded (Triton) tile; None when it splits nothing."""
    if split is None:
        return None
    if split[0] != cout:
        raise Unsupported("the epilogue splits an axis other than the channels into groups")
    if kernel_out in jaxpr.outvars:
        shapes = [tuple(t.jaxpr.jaxpr.outvars[jaxpr.outvars.index(kernel_out)].aval.shape) for t in probes.traces]
    else:
        producer = next(e for e in jaxpr.eqns if kernel_out in e.outvars)
        at = producer.outvars.index(kernel_out)
        shapes = [tuple(e.outvars[at].aval.shape) for e in probes.peers(producer)]
    if any(_size(probes, [sh[k] for sh in shapes]) == cout for k in range(len(shapes[0]))):
        raise Unsupported("the epilogue splits the channels into groups and its output keeps a channel axis "
                          "(padded group by group on a Triton tile)")
    sources = {v.name: v.source for v in probes.vars}
    return tuple(re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda m: sources.get(m.group(0), m.group(0)), e)
                 for e in split[1:])


def _operand_lines(conv: Any, x_name: str, w_name: str, lhs: Operand, rhs: Operand, x_perm: tuple[int, ...],
                   w_perm: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """The written kernel's lines that bring the inputs to the kernel's layout: x (N, *spatial, Cin) padded as the
    reference pads, w (*window, Cin, Cout)."""
    pads = tuple(tuple(int(v) for v in p) for p in conv.params["padding"])
    x_expr = x_name if x_perm == tuple(range(len(x_perm))) else f"jnp.transpose({x_name}, {x_perm})"
    x_expr += "".join(f".astype(jnp.{c})" for c in lhs.casts)
    x_lines = [] if x_expr == "x" else [f"    x = {x_expr}  # channels last: (N, *spatial, Cin)"]
    if any(lo or hi for lo, hi in pads):
        x_lines.append(f"    x = jnp.pad(x, ((0, 0), {', '.join(repr(p) for p in pads)}, (0, 0)))  # the padding")
    w_expr = w_name if w_perm == tuple(range(len(w_perm))) else f"jnp.transpose({w_name}, {w_perm})"
    w_expr += "".join(f".astype(jnp.{c})" for c in rhs.casts)
    w_lines = [] if w_expr == "w" else [f"    w = {w_expr}  # (*window, Cin, Cout)"]
    return x_lines, w_lines


def _precision(conv: Any) -> str:
    prec = conv.params.get("precision")
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        return f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    return "None"


def _unfused(task: Task, names: list[str], target: str, conv: Any, lhs: Operand, rhs: Operand,
             x_perm: tuple[int, ...], w_perm: tuple[int, ...], params: list[int], epilogue: list[Any], jaxpr: Any,
             probes: Any, taken: set[str], itemsize: int) -> Proposal | None:
    """The variant that fuses nothing: the kernel writes the convolution (tiled over output channels where the
    channels allow), and the reference's work after it runs in XLA on whole arrays. None when that work has no
    whole-array form."""
    invars = list(jaxpr.invars)
    pnames = [names[i] for i in params]
    try:
        ep = whole_epilogue(epilogue, conv.outvars[0], list(jaxpr.outvars), [(invars[i], names[i]) for i in params],
                            probes, taken | {"_epilogue"})
    except Unsupported:
        return None
    gpu = kernel_language(target) == "triton"
    shapes = Shapes.of(tuple(conv.invars[0].aval.shape), tuple(conv.invars[1].aval.shape), itemsize,
                       fused_epilogue=False)
    tuning = space(target, shapes)
    cfg = default(CHIPS[target], shapes).kwargs(target)
    config = {k: (cfg[k] if cfg[k] in v else v[0]) for k, v in tuning.items()}
    used = probes.used(*ep.lines, *ep.outputs)
    x_name, w_name = names[lhs.index], names[rhs.index]
    x_lines, w_lines = _operand_lines(conv, x_name, w_name, lhs, rhs, x_perm, w_perm)
    s = len(conv.params["window_strides"])
    text = (f"out = epilogue(conv({x_name}, {w_name}){''.join(', ' + n for n in pnames)}): a stride-1 convolution "
            f"as an implicit GEMM, the kernel mk/kernels/conv/{target}.py copied below unchanged, with nothing fused: "
            "it writes the convolution (tiled over output channels where block_cout allows) and the reference's "
            "own work after it runs in XLA on whole arrays. Sizes and static values are read from the arguments at "
            "trace time.")
    lines = [
        *file_head(f"mk offline author: convolution, epilogue in XLA, for {task.name} (target {target}).", text,
                   gpu=gpu, space=tuning, imports=("import itertools", "import math")),
        "", *family_section("conv", target, gpu_kernel if gpu else tpu_kernel), "", "",
        f"def _epilogue(y{''.join(', ' + n for n in pnames)}{', *, ' + ', '.join(v.name for v in used) if used else ''}):",
        '    """The reference after its convolution, on whole arrays (XLA, after the kernel)."""',
        *[f"    {l}" for l in ep.lines],
        f"    return {ep.outputs[0]}",
        "", "",
        f"def kernel({signature(task, ', '.join(f'{k}={v!r}' for k, v in config.items()))}):",
        *([f"    epilogue = functools.partial(_epilogue, {', '.join(f'{v.name}={v.source}' for v in used)})"] if used
          else ["    epilogue = _epilogue"]),
        *x_lines, *w_lines,
        f"    y = {'conv_gpu' if gpu else 'conv_tpu'}(x, w, out_dtype={dtype_expr(conv.outvars[0].aval.dtype)}, "
        f"precision={_precision(conv)}, {', '.join(f'{k}={k}' for k in config)})",
        f"    return epilogue(y{''.join(', ' + n for n in pnames)})",
        "",
    ]
    return Proposal(
        name=f"conv-xla-epilogue-{target}",
        source="\n".join(lines),
        rationale=f"{s}-D convolution as an implicit GEMM with nothing fused: the kernel writes the convolution "
        f"(tuned over {', '.join(tuning) or 'nothing'}) and the epilogue "
        f"({', '.join(sorted(p for p in ep.primitives if not p.startswith('_'))) or 'none'}) runs in XLA on whole "
        "arrays after it, one extra round trip of the convolution's output through HBM for a kernel free to tile "
        "output channels",
        template="conv",
    )


def _size(probes: Any, values: list[int]) -> str:
    try:
        return probes.dim(values)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc


def _defined(target: str) -> set[str]:
    src = module_body(tpu_kernel if kernel_language(target) == "mosaic" else gpu_kernel)
    return set(re.findall(r"^def ([A-Za-z_][A-Za-z0-9_]*)", src, re.M)) | {"itertools", "math"}


def _render(task: Task, names: list[str], used: list, body: Any, target: str, conv: Any, lhs: Operand, rhs: Operand,
            x_perm: tuple[int, ...], w_perm: tuple[int, ...], params: list[int], channel_axes: list[tuple[int, ...]],
            tuning: dict[str, list[Any]], config: dict[str, Any], out_dtype: str, tail: Any = None,
            tail_used: list = (), groups: tuple[str, str] | None = None) -> str:
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    prec = conv.params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    pnames = [names[i] for i in params]
    kwargs = ", ".join(v.name for v in used)
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    acc_dtype = np.dtype(conv.outvars[0].aval.dtype)
    x_name, w_name = names[lhs.index], names[rhs.index]
    x_lines, w_lines = _operand_lines(conv, x_name, w_name, lhs, rhs, x_perm, w_perm)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    text = (f"out = epilogue(conv({x_name}, {w_name}){''.join(', ' + n for n in pnames)}), a stride-1 convolution as "
            "an implicit GEMM with the reference's own work after it fused per sample. The kernel is "
            f"mk/kernels/conv/{target}.py, copied below unchanged; only _epilogue is generated from the reference. "
            "Sizes and static values are read from the arguments at trace time"
            + ("; Triton blocks are powers of two, so the tile is zero-padded and every reduction in the epilogue "
               "masks the padding out." if gpu else "."))
    lines = [
        *file_head(f"mk offline author: convolution with fused epilogue for {task.name} (target {target}).", text, gpu=gpu,
                   space=tuning, imports=("import itertools", "import math")),
        "",
        *family_section("conv", target, module),
        "",
        "",
        *([*MASKED_HELPER.splitlines(), "", ""] if "_masked" in body.primitives else []),
        *helpers(body.primitives, has_pow2=gpu),
        f"def _epilogue(tile{''.join(', ' + n for n in pnames)}{', *, ' + kwargs if kwargs else ''}):",
        '    """The reference after its convolution, on one sample\'s tile (1, *spatial, channels)."""',
        f"    acc = tile.astype({dtype_expr(acc_dtype)})" if acc_dtype != np.float32 else "    acc = tile",
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        *([f"    epilogue = functools.partial(_epilogue, {bind})"] if bind else ["    epilogue = _epilogue"]),
        *([] if tail is None else
          [f"    tail = functools.partial(_tail, {', '.join(f'{v.name}={v.source}' for v in tail_used)})" if tail_used
           else "    tail = _tail"]),
        *x_lines,
        *w_lines,
        f"    {'return' if tail is None else 'y ='} {'conv_gpu' if gpu else 'conv_tpu'}(x, w"
        f"{''.join(', ' + n for n in pnames)}, epilogue=epilogue, "
        + (f"channel_axes={channel_axes!r}, " if gpu else "")
        + (f"channel_groups=({groups[0]}, {groups[1]}), " if groups else "")
        + f"out_dtype={out_dtype}, precision={prec_expr}, {cfg_call})",
        *([] if tail is None else [f"    return tail(y{''.join(', ' + n for n in pnames)})"]),
        "",
    ]
    if tail is not None:
        at = lines.index(f"def kernel({signature(task, cfg_sig)}):")
        tkw = ", ".join(v.name for v in tail_used)
        lines[at:at] = [
            f"def _tail(y{''.join(', ' + n for n in pnames)}{', *, ' + tkw if tkw else ''}):",
            '    """The reference from its first statistic across samples on: whole arrays, after the kernel."""',
            *[f"    {l}" for l in tail.lines],
            f"    return {tail.outputs[0]}",
            "",
            "",
        ]
    return "\n".join(lines)

