"""Convolution recogniser: one ``conv_general_dilated`` and the work after it, bound to :mod:`mk.kernels.conv`.

Applies when the reference is a single stride-1, ungrouped convolution with an
undilated window (1-3 spatial axes, any padding, operands reaching it through
transposes, casts and reversals from two inputs) followed by per-sample work on
its output: bias, activations, norms whose statistics stay inside one sample
(InstanceNorm, GroupNorm, LayerNorm), pooling over the sample, reductions over
channels. That work is the *epilogue*: emitted from the jaxpr by
:mod:`mk.author.emit` and run on each finished tile, so the convolution's output
never goes to HBM. The kernel itself is not generated: the written file carries
``mk/kernels/conv/{tpu,gpu}.py`` verbatim and calls it. Statistics across
samples (training-mode BatchNorm) split the epilogue: the kernel fuses the
per-sample part before the first of them, and the rest runs after the kernel
on its output, as whole-array JAX (XLA fuses it).

A transposed convolution written as a stride-1 convolution over a zero-dilated
copy of its input (a scatter into zeros at a stride, ``lax.pad`` with interior
padding, or the convolution's own ``lhs_dilation``) and a flipped window is
accepted too: the dilation, the padding and the flip are pure data movement and
stay in XLA before the kernel (one ``lax.pad``, one ``lax.rev``), and the
kernel runs the stride-1 convolution over the dilated input as the reference
does, zeros included (stride**s times the FLOPs of a sub-pixel transposed
convolution).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from mk.author.emit import dtype_expr, Emitter, family_section, file_head, language_stem, body_helpers, module_body, Unsupported
from mk.author.ir import stated_precision
from mk.author.groups import GroupEmitter, helpers
from mk.author.pooling import PoolEmitter
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.split import split_epilogue, whole_epilogue
from mk.author.trace import Traced
from mk.kernels.conv import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec


@dataclass(frozen=True)
class Operand:
    index: int  # the task input feeding it
    casts: tuple[str, ...]  # dtype names applied in order
    axes: tuple[int, ...]  # operand axis i is axis axes[i] of the input
    #: operand axes reversed (``rev``, e.g. a flipped window), applied after the transposes and casts
    flips: tuple[int, ...] = ()
    #: per operand axis (lo, hi, interior): zero padding and zero dilation (a scatter into zeros at a stride, or
    #: ``lax.pad`` with interior padding, as a transposed convolution writes it), applied after the flips; None: none
    pads: tuple[tuple[int, int, int], ...] | None = None


#: primitives that only move data (no arithmetic) between a task input and a convolution operand
_MOVES = ("convert_element_type", "transpose", "rev", "pad", "scatter", "jit", "pjit")


def _trace_back(var: Any, producers: dict[Any, Any], invars: list[Any], used: set[int]) -> Operand:
    casts: list[str] = []
    axes = list(range(len(var.aval.shape)))
    flips: set[int] = set()  # operand axes reversed after (in program order) the op being read
    pads: list[tuple[tuple[int, int, int], ...]] = []  # in operand axes, outermost first
    while var not in invars:
        eqn = producers.get(var)
        if eqn is None:
            raise Unsupported("a convolution operand is not an input")
        used.add(id(eqn))
        name = eqn.primitive.name
        if name == "convert_element_type":
            casts.append(str(eqn.params["new_dtype"]))
            var = eqn.invars[0]
        elif name == "transpose":
            perm = tuple(eqn.params["permutation"])
            axes = [perm[a] for a in axes]
            var = eqn.invars[0]
        elif name == "rev":
            dims = set(eqn.params["dimensions"])
            flips ^= {i for i, a in enumerate(axes) if a in dims}
            var = eqn.invars[0]
        elif name in ("pad", "scatter", "jit", "pjit"):
            cfg, var = (_zero_pad if name != "scatter" else _zero_dilation)(eqn, producers)
            # rev(pad(v)) == pad(rev(v)) with lo and hi swapped on the reversed axes
            pads.append(tuple((cfg[a][1], cfg[a][0], cfg[a][2]) if i in flips else cfg[a]
                              for i, a in enumerate(axes)))
        else:
            raise Unsupported(f"a convolution operand is computed by {name!r} before the convolution")
    return Operand(invars.index(var), tuple(reversed(casts)), tuple(axes), tuple(sorted(flips)),
                   _compose_pads(list(reversed(pads)), len(axes)))


def _feeding(jaxpr: Any, used: set[int]) -> None:
    """Add to ``used`` the eqns that only feed used ones (the zeros and index arithmetic of a dilation)."""
    readers: dict[Any, list[Any]] = {}
    for e in jaxpr.eqns:
        for v in e.invars:
            if not hasattr(v, "val"):
                readers.setdefault(v, []).append(e)
    outs = set(v for v in jaxpr.outvars if not hasattr(v, "val"))
    for e in reversed(jaxpr.eqns):
        if id(e) in used or e.effects:
            continue
        if all(o not in outs and readers.get(o) and all(id(r) in used for r in readers[o]) for o in e.outvars):
            used.add(id(e))


def _compose_pads(pads: list[tuple[tuple[int, int, int], ...]], rank: int) -> tuple[tuple[int, int, int], ...] | None:
    """One (lo, hi, interior) per axis for zero pads applied in order: a dilation first, then edge padding."""
    if not pads:
        return None
    out = [(0, 0, 0)] * rank
    for cfg in pads:
        for a, (lo, hi, interior) in enumerate(cfg):
            lo0, hi0, in0 = out[a]
            if interior and (lo0 or hi0 or in0):
                raise Unsupported("a convolution operand is dilated after it is padded")
            out[a] = (lo0 + lo, hi0 + hi, in0 + interior)
    return tuple(out)


def _is_zero(var: Any, producers: dict[Any, Any]) -> bool:
    """``var`` is a scalar literal zero, or a broadcast of one (what ``jnp.zeros`` writes), through casts."""
    from jax._src.core import Literal

    while not isinstance(var, Literal):
        eqn = producers.get(var)
        if eqn is None or eqn.primitive.name not in ("convert_element_type", "broadcast_in_dim"):
            return False
        var = eqn.invars[0]
    return np.asarray(var.val).shape == () and float(np.asarray(var.val)) == 0.0


def _constant(var: Any, producers: dict[Any, Any]) -> np.ndarray:
    """The value of ``var`` when it depends on no input (index arithmetic on iotas), evaluated here."""
    from jax._src.core import Literal

    if isinstance(var, Literal):
        return np.asarray(var.val)
    eqn = producers.get(var)
    if eqn is None or eqn.primitive.name in ("scatter", "pad") or eqn.primitive.name.startswith("random"):
        raise Unsupported("a convolution operand is scattered to indices that are not index arithmetic on literals "
                          "and iotas")
    outs = eqn.primitive.bind(*(_constant(v, producers) for v in eqn.invars), **eqn.params)
    outs = outs if eqn.primitive.multiple_results else [outs]
    return np.asarray(outs[eqn.outvars.index(var)])


def _zero_pad(eqn: Any, producers: dict[Any, Any]) -> tuple[tuple[tuple[int, int, int], ...], Any]:
    """(lo, hi, interior) per axis and the padded var of a ``pad`` with zero fill (bare, or as ``jnp.pad``'s jit)."""
    if eqn.primitive.name == "pad":
        operand, fill, inner = eqn.invars[0], eqn.invars[1], eqn
    else:
        body = eqn.params["jaxpr"].jaxpr
        pads = [e for e in body.eqns if e.primitive.name == "pad"]
        if len(pads) != 1 or any(e.primitive.name not in ("pad", "convert_element_type") for e in body.eqns) \
                or len(body.outvars) != 1 or body.outvars[0] is not pads[0].outvars[0]:
            raise Unsupported(f"a convolution operand is computed by a jit ({eqn.params.get('name')!r}) that is not "
                              "a pad")
        inner = pads[0]
        outer = dict(zip(body.invars, eqn.invars))
        inner_producers = {o: e for e in body.eqns for o in e.outvars}

        def lift(v: Any) -> Any:  # an inner var back to the outer var it is a cast of
            while v not in outer:
                e = inner_producers.get(v)
                if e is None or e.primitive.name != "convert_element_type":
                    return v
                v = e.invars[0]
            return outer[v]

        operand, fill = lift(inner.invars[0]), lift(inner.invars[1])
        if inner.invars[0] not in outer:
            raise Unsupported("a convolution operand is padded after arithmetic")
    if not _is_zero(fill, producers):
        raise Unsupported("a convolution operand is padded with a value other than zero")
    cfg = tuple((int(lo), int(hi), int(i)) for lo, hi, i in inner.params["padding_config"])
    if any(v < 0 for c in cfg for v in c):
        raise Unsupported("a convolution operand is cropped (negative padding)")
    return cfg, operand


def _zero_dilation(eqn: Any, producers: dict[Any, Any]) -> tuple[tuple[tuple[int, int, int], ...], Any]:
    """(lo, hi, interior) per axis and the scattered var of a scatter into zeros at a stride on some axes
    (``jnp.zeros(...).at[:, ::s, ::s].set(v)``): the same array as ``lax.pad(v, 0, that)``."""
    if eqn.params.get("update_jaxpr") is not None or len(eqn.invars) != 3:
        raise Unsupported("a convolution operand is a scatter that combines values")
    operand, indices, updates = eqn.invars
    if not _is_zero(operand, producers):
        raise Unsupported("a convolution operand is scattered into an array that is not zeros")
    dn = eqn.params["dimension_numbers"]
    shape, ushape = tuple(operand.aval.shape), tuple(updates.aval.shape)
    rank = len(shape)
    scattered = tuple(dn.inserted_window_dims)
    window = tuple(a for a in range(rank) if a not in scattered)
    if (dn.operand_batching_dims or len(ushape) != rank or tuple(dn.update_window_dims) != window
            or tuple(dn.scatter_dims_to_operand_dims) != scattered or operand.aval.dtype != updates.aval.dtype
            or any(ushape[a] != shape[a] for a in window)):
        raise Unsupported("a convolution operand is a scatter other than a strided set into zeros")
    idx = _constant(indices, producers).astype(np.int64)
    if idx.shape != (*(ushape[a] for a in scattered), len(scattered)):
        raise Unsupported("a convolution operand is a scatter other than a strided set into zeros")
    cfg = [(0, 0, 0)] * rank
    for t, a in enumerate(scattered):
        n = ushape[a]
        start = int(idx.reshape(-1, len(scattered))[0, t])
        step = int(np.take(idx[..., t], 1, axis=t).reshape(-1)[0]) - start if n > 1 else 1
        want = start + step * np.arange(n).reshape([n if k == t else 1 for k in range(len(scattered))])
        if step < 1 or not np.array_equal(idx[..., t], np.broadcast_to(want, idx.shape[:-1])) \
                or start + step * (n - 1) >= shape[a]:
            raise Unsupported("a convolution operand is a scatter other than a strided set into zeros")
        cfg[a] = (start, shape[a] - 1 - start - step * (n - 1), step - 1)
    return tuple(cfg), updates


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
    if any(v != 1 for v in (*p["window_strides"], *p["rhs_dilation"])):
        raise Unsupported("a strided convolution or a dilated window")
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
    _feeding(jaxpr, used)
    if rhs.pads is not None:
        raise Unsupported("the convolution's window is padded or dilated")
    x_order = (dn.lhs_spec[0], *dn.lhs_spec[2:], dn.lhs_spec[1])
    w_order = (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0])
    x_perm = tuple(lhs.axes[a] for a in x_order)
    w_perm = tuple(rhs.axes[a] for a in w_order)
    probes = probes_for(task, traced)
    x_pads, base_pads = _x_padding(conv, lhs, x_order, probes)
    x_in = tuple(invars[lhs.index].aval.shape[a] for a in x_perm)
    layout = _Layout(x_perm, w_perm, tuple(j for j, a in enumerate(x_order) if a in lhs.flips),
                     tuple(j for j, a in enumerate(w_order) if a in rhs.flips), x_pads,
                     tuple((n - 1) * (i + 1) + 1 + lo + hi for n, (lo, hi, i) in zip(x_in, base_pads)),
                     _kernel_shape(conv, 1, w_order))
    if len(jaxpr.outvars) != 1:
        raise Unsupported("the conv template writes one output")
    names = arg_names(task)
    defined = _defined(target)
    if set(names) & defined:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & defined)}")
    params = [i for i in range(len(invars)) if i not in (lhs.index, rhs.index)]
    clash = ({"y", "tail", "epilogue"} & set(names)) | ({"x", "w", "x_pads"} & {names[i] for i in params})
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
    # Triton pads an epilogue input's channel axes like the channels, and every other axis to a power of two:
    # the size of an output pixel axis on the padded tile (a LayerNorm over W has a weight of W's size)
    pixels = {_size(probes, [e.outvars[0].aval.shape[k] for e in peers]) for k in range(1, s + 1)}
    for i in params:
        sizes = [_size(probes, [t.shapes[i][k] for t in probes.traces]) for k in range(len(invars[i].aval.shape))]
        channel_axes.append(tuple(k for k, z in enumerate(sizes) if z == cout))
        if gpu and any(z not in ("1", cout, *pixels) for z in sizes):
            raise Unsupported(f"input {names[i]!r} has an axis that is neither 1, the output channels nor an output "
                              "pixel axis (Triton pads only those axes of an epilogue input)")
    conv_shapes = Shapes.of(layout.x_shape, layout.w_shape,
                            np_dtype(task.args[lhs.index].dtype).itemsize, fused_epilogue=True)
    tuning = space(target, conv_shapes)
    cfg = default(kernel_spec(target), conv_shapes).kwargs(target)
    config = {k: (cfg[k] if cfg[k] in v else v[0]) for k, v in tuning.items()}
    src = _render(task, names, probes.used(*body.lines, *body.outputs), body, target, conv, lhs, rhs, layout,
                  params, channel_axes, tuning, config, dtype_expr(kernel_out.aval.dtype), tail,
                  probes.used(*tail.lines, *tail.outputs) if tail else [], groups)
    if not gpu and _rows_independent(src, task, t0.scale, names, params, conv):
        # the epilogue keeps the rows of the first output axis apart: the kernel runs it per row block
        head, call = src.rsplit("epilogue=epilogue, ", 1)  # the written kernel's call (the last one in the file)
        src = f"{head}epilogue=epilogue, rows_independent=True, {call}"
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
    unfused = _unfused(task, names, target, conv, lhs, rhs, layout, params, epilogue, jaxpr, probes, taken,
                       np_dtype(task.args[lhs.index].dtype).itemsize)
    return [fused] if unfused is None else [fused, unfused]


def _rows_independent(src: str, task: Task, scale: str, names: list[str], params: list[int], conv: Any) -> bool:
    """Whether the written epilogue treats the rows of the first output spatial axis independently, so the TPU
    kernel may run it on blocks of rows: the rendered ``_epilogue`` run at the authoring size on a random tile
    gives, on each half of the rows, what it gives on those rows of the whole tile (an axis of its output follows
    the row count one to one). Statistics over the sample (InstanceNorm, GroupNorm, pooling) do not."""
    import jax
    import jax.numpy as jnp

    out = tuple(int(d) for d in conv.outvars[0].aval.shape)  # (N, *O, C), channels last
    rows = out[1]
    if rows < 2:
        return False
    structs = dict(zip(names, task.arg_structs(scale)))
    try:
        ns: dict[str, Any] = {}
        exec(compile(src, "<conv-written>", "exec"), ns)  # mk's own rendered source
        kernel_src = src[src.index("def kernel("):]
        bind = re.search(r"epilogue = functools\.partial\(_epilogue, (.*)\)\n", kernel_src)
        kwargs = eval(f"dict({bind.group(1)})", dict(ns), dict(structs)) if bind else {}  # sizes of the arguments
        ep = lambda t, *p: ns["_epilogue"](t, *p, **kwargs)  # noqa: E731
        key = jax.random.split(jax.random.key(0), 1 + len(params))
        ps = [jax.random.uniform(k, structs[names[i]].shape, jnp.float32, 0.5, 1.5).astype(structs[names[i]].dtype)
              for k, i in zip(key[1:], params)]
        axis = ns["_conv_row_axis"](ep, ps, out[1:-1], out[-1], rows)
        if axis is None:
            return False
        tile = jax.random.normal(key[0], (1, *out[1:]), jnp.float32)
        whole = np.asarray(ep(tile, *ps), np.float64)
        cut = rows // 2
        parts = [np.asarray(ep(tile[:, a:b], *ps), np.float64) for a, b in ((0, cut), (cut, rows))]
        return bool(np.allclose(np.concatenate(parts, axis=axis), whole, rtol=1e-5, atol=1e-5))
    except Exception:  # noqa: BLE001 - not provably row by row: the whole sample per program
        return False


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


@dataclass(frozen=True)
class _Layout:
    """How the written kernel brings its inputs to the kernel's layout, in the kernel's axes: x (N, *spatial, Cin),
    w (*window, Cin, Cout)."""

    x_perm: tuple[int, ...]  # kernel axis j of x is axis x_perm[j] of the input
    w_perm: tuple[int, ...]
    x_flips: tuple[int, ...]  # kernel axes reversed
    w_flips: tuple[int, ...]
    #: (lo, hi, interior) per kernel axis of x as source (numbers, or expressions of the kernel's arguments): the
    #: reference's zero dilation and padding of the image and the convolution's own padding, composed
    x_pads: tuple[tuple[str, str, str], ...]
    x_shape: tuple[int, ...]  # the kernel's x (dilated and padded) and w at the authoring scale
    w_shape: tuple[int, ...]


def _x_padding(conv: Any, lhs: Operand, x_order: tuple[int, ...],
               probes: Any) -> tuple[tuple[tuple[str, str, str], ...], tuple[tuple[int, int, int], ...]]:
    """The image's composed zero dilation and padding per kernel axis, at every trace, as source; and its
    numbers at the authoring scale."""
    per_trace = []
    for t, peer in zip(probes.traces, probes.peers(conv)):
        if peer is conv:
            op = lhs
        else:
            jp = t.jaxpr.jaxpr
            op = _trace_back(peer.invars[0], {o: e for e in jp.eqns for o in e.outvars}, list(jp.invars), set())
        cfg = [op.pads[a] if op.pads else (0, 0, 0) for a in x_order]
        # the convolution's own input dilation (lax.conv_transpose writes one), then its padding
        dilation = [(0, 0, 0), *((0, 0, int(d) - 1) for d in peer.params["lhs_dilation"]), (0, 0, 0)]
        padding = [(0, 0, 0), *((int(lo), int(hi), 0) for lo, hi in peer.params["padding"]), (0, 0, 0)]
        per_trace.append(_compose_pads([tuple(cfg), tuple(dilation), tuple(padding)], len(x_order)))
    sources = {v.name: v.source for v in probes.vars}
    return tuple(tuple(re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda m: sources.get(m.group(0), m.group(0)),
                              _size(probes, [c[j][m] for c in per_trace])) for m in range(3))
                 for j in range(len(x_order))), per_trace[0]


def _operand_lines(x_name: str, w_name: str, lhs: Operand, rhs: Operand,
                   layout: _Layout) -> tuple[list[str], list[str]]:
    """The written kernel's lines that bring the inputs to the kernel's layout: x (N, *spatial, Cin) dilated and
    padded as the reference does it, w (*window, Cin, Cout)."""
    x_perm, w_perm, pads = layout.x_perm, layout.w_perm, layout.x_pads
    x_expr = x_name if x_perm == tuple(range(len(x_perm))) else f"jnp.transpose({x_name}, {x_perm})"
    x_expr += "".join(f".astype(jnp.{c})" for c in lhs.casts)
    x_lines = [] if x_expr == "x" else [f"    x = {x_expr}  # channels last: (N, *spatial, Cin)"]
    if not all(p.isdigit() for c in pads for p in c):  # sizes read from the arguments before x is rebound
        x_lines.insert(0, f"    x_pads = ({', '.join('(' + ', '.join(c) + ')' for c in pads)},)")
        pad_expr = "x_pads"
    else:
        pad_expr = None
    if layout.x_flips:
        x_lines.append(f"    x = lax.rev(x, {layout.x_flips})  # the reference reverses these axes")
    if any(c[2] != "0" for c in pads):
        x_lines.append(f"    x = lax.pad(x, jnp.zeros((), x.dtype), "
                       f"{pad_expr or '(' + ', '.join('(' + ', '.join(c) + ')' for c in pads) + ')'})"
                       "  # (lo, hi, interior): zeros between the pixels (the input dilation of a transposed "
                       "convolution) and the padding, as the reference builds its input")
    elif any(c[:2] != ("0", "0") for c in pads):
        x_lines.append("    x = jnp.pad(x, " + (f"tuple(c[:2] for c in {pad_expr})" if pad_expr else
                       "(" + ", ".join(f"({c[0]}, {c[1]})" for c in pads) + ")") + ")  # the padding")
    w_expr = w_name if w_perm == tuple(range(len(w_perm))) else f"jnp.transpose({w_name}, {w_perm})"
    w_expr += "".join(f".astype(jnp.{c})" for c in rhs.casts)
    w_lines = [] if w_expr == "w" else [f"    w = {w_expr}  # (*window, Cin, Cout)"]
    if layout.w_flips:
        w_lines.append(f"    w = lax.rev(w, {layout.w_flips})  # the reference flips the window")
    return x_lines, w_lines


def _unfused(task: Task, names: list[str], target: str, conv: Any, lhs: Operand, rhs: Operand,
             layout: "_Layout", params: list[int], epilogue: list[Any], jaxpr: Any,
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
    shapes = Shapes.of(layout.x_shape, layout.w_shape, itemsize, fused_epilogue=False)
    tuning = space(target, shapes)
    cfg = default(kernel_spec(target), shapes).kwargs(target)
    config = {k: (cfg[k] if cfg[k] in v else v[0]) for k, v in tuning.items()}
    if not gpu and "block_cout" in config:  # None: planned by the kernel for the shapes it is called with
        config["block_cout"] = None
    used = probes.used(*ep.lines, *ep.outputs)
    x_name, w_name = names[lhs.index], names[rhs.index]
    x_lines, w_lines = _operand_lines(x_name, w_name, lhs, rhs, layout)
    s = len(conv.params["window_strides"])
    text = (f"out = epilogue(conv({x_name}, {w_name}){''.join(', ' + n for n in pnames)}): a stride-1 convolution "
            f"as an implicit GEMM, the kernel mk/kernels/conv/{language_stem(target)}.py copied below unchanged, with nothing fused: "
            "it writes the convolution (tiled over output channels where block_cout allows) and the reference's "
            "own work after it runs in XLA on whole arrays. Sizes and static values are read from the arguments at "
            "trace time.")
    lines = [
        *file_head(f"mk offline author: convolution, epilogue in XLA, for {task.name} (target {target}).", text,
                   gpu=gpu, space=tuning, imports=("import itertools", "import math")),
        "", *family_section(gpu_kernel if gpu else tpu_kernel), "", "",
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
        f"precision={stated_precision(conv)}, {', '.join(f'{k}={k}' for k in config)})",
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


def _kernel_shape(conv: Any, at: int, order: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the convolution's operand ``at`` (0: image, 1: window) in the kernel's layout."""
    shape = conv.invars[at].aval.shape
    return tuple(int(shape[a]) for a in order)


def _size(probes: Any, values: list[int]) -> str:
    try:
        return probes.dim(values)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc


def _defined(target: str) -> set[str]:
    src = module_body(tpu_kernel if kernel_language(target) == "mosaic" else gpu_kernel)
    return set(re.findall(r"^def ([A-Za-z_][A-Za-z0-9_]*)", src, re.M)) | {"itertools", "math"}


def _render(task: Task, names: list[str], used: list, body: Any, target: str, conv: Any, lhs: Operand, rhs: Operand,
            layout: "_Layout", params: list[int], channel_axes: list[tuple[int, ...]],
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
    x_lines, w_lines = _operand_lines(x_name, w_name, lhs, rhs, layout)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    text = (f"out = epilogue(conv({x_name}, {w_name}){''.join(', ' + n for n in pnames)}), a stride-1 convolution as "
            "an implicit GEMM with the reference's own work after it fused per sample. The kernel is "
            f"mk/kernels/conv/{language_stem(target)}.py, copied below unchanged; only _epilogue is generated from the reference. "
            "Sizes and static values are read from the arguments at trace time"
            + ("; Triton blocks are powers of two, so the tile is zero-padded and every reduction in the epilogue "
               "masks the padding out." if gpu else "."))
    lines = [
        *file_head(f"mk offline author: convolution with fused epilogue for {task.name} (target {target}).", text, gpu=gpu,
                   space=tuning, imports=("import itertools", "import math")),
        "",
        *family_section(module),
        "",
        "",
        *body_helpers(body),
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

