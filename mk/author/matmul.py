"""Matmul template: a tiled matrix product with the reference's epilogue fused.

Applies when the reference is one 2-D ``dot_general`` (``x @ w`` or
``x @ w.T``, casts allowed on the operands) followed by block-local work on
its output: bias, scale, residual, clamp, activations ... taken from the
jaxpr after the dot and emitted by :mod:`mk.author.emit`. The kernels are
:mod:`mk.kernels.matmul` (TPU: a K-loop over the grid's last axis with an f32
VMEM accumulator; GPU (Triton): a K-loop inside the kernel; an epilogue that
reduces along N keeps whole rows, ``full_n=True``, blocks planned at trace time), copied verbatim into the
written file: this recogniser generates only ``_epilogue`` and the ``kernel``
that passes it, with each parameter's tiling kind, to the family's kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mk.author.emit import dtype_expr, Emitter, family_section, file_head, language_stem, body_helpers, ERF_HELPER, Unsupported
from mk.author.ir import stated_precision
from mk.author.groups import GroupEmitter, helpers
from mk.author.pooling import PoolEmitter
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author import matmul_splitk
from mk.author.split import split_epilogue, whole_epilogue
from mk.author.trace import Traced
from mk.kernels.matmul import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec


@dataclass(frozen=True)
class Operand:
    index: int  # task input feeding it
    casts: tuple[str, ...]  # dtype names applied in order
    transposed: bool


def _trace_back(var: Any, producers: dict[Any, Any], invars: list[Any], used: set[int]) -> Operand:
    casts: list[str] = []
    transposed = False
    while var not in invars:
        eqn = producers.get(var)
        if eqn is None:
            raise Unsupported("a matmul operand is not an input")
        used.add(id(eqn))
        if eqn.primitive.name == "convert_element_type":
            casts.append(str(eqn.params["new_dtype"]))
        elif eqn.primitive.name == "transpose" and tuple(eqn.params["permutation"]) == (1, 0):
            transposed = not transposed
        else:
            raise Unsupported(f"a matmul operand is computed by {eqn.primitive.name!r} before the product")
        var = eqn.invars[0]
    return Operand(invars.index(var), tuple(reversed(casts)), transposed)


def propose(task: Task, traced: list[Traced], target: str) -> list[Proposal]:
    t0 = traced[0]
    jaxpr = t0.jaxpr.jaxpr
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    if not dots:
        raise Unsupported("the matmul template needs a top-level matrix product, found none")
    dot = dots[0]  # the kernel's; any later product runs after the kernel (split.py), where XLA computes it
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    if lb or rb or len(lc) != 1:
        raise Unsupported("a batched or multi-axis contraction")
    a, b = dot.invars
    if len(a.aval.shape) != 2 or len(b.aval.shape) != 2:
        raise Unsupported("the matrix product's operands are not 2-D")
    producers = {o: e for e in jaxpr.eqns for o in e.outvars}
    used: set[int] = {id(dot)}
    invars = list(jaxpr.invars)
    lhs = _trace_back(a, producers, invars, used)
    rhs = _trace_back(b, producers, invars, used)
    # orientation of the original inputs: x is (M, K) or transposed; w is (K, N) or (N, K)
    x_t = (lc[0] == 0) != lhs.transposed
    w_t = (rc[0] == 1) != rhs.transposed
    if x_t:
        raise Unsupported("the left operand is used transposed")
    epilogue = [e for e in jaxpr.eqns if id(e) not in used]
    pos = jaxpr.eqns.index(dot)
    if any(jaxpr.eqns.index(e) < pos for e in epilogue):
        raise Unsupported("work before the matrix product that is not a cast or transpose")
    if len(jaxpr.outvars) != 1:
        raise Unsupported("the matmul template writes one output")
    probes = probes_for(task, traced)
    names = arg_names(task)
    M, N = dot.outvars[0].aval.shape
    # which variable each size is: M is the lhs's rows, N the product's columns (at every probe)
    m_size = _size(probes, [e.outvars[0].aval.shape[0] for e in probes.peers(dot)])
    n_size = _size(probes, [e.outvars[0].aval.shape[1] for e in probes.peers(dot)])
    params = [i for i in range(len(invars)) if i not in (lhs.index, rhs.index)]
    param_kinds = []
    for i in params:
        shape = tuple(invars[i].aval.shape)
        sizes = [_size(probes, [t.shapes[i][k] for t in probes.traces]) for k in range(len(shape))]
        if all(s == "1" for s in sizes):
            param_kinds.append("scalar")
        elif sizes == [m_size, n_size]:
            param_kinds.append("tile")
        elif sizes in ([n_size], ["1", n_size]):
            param_kinds.append("col")
        elif sizes in ([m_size], [m_size, "1"]):
            param_kinds.append("row")
        else:  # read whole, by work split off after the kernel only (see below)
            param_kinds.append("whole")
    pad = kernel_language(target) == "triton"  # Triton blocks are powers of two: N may be padded, reductions over it are masked
    taken = set(names) | {v.name for v in probes.vars} | {"acc", "y", "tail"}

    def make() -> Emitter:
        em = GroupEmitter(1, probes, taken=taken) if pad else PoolEmitter(1, probes, taken=taken)
        em.bind(dot.outvars[0], "acc", True)
        for i, kind in zip(params, param_kinds):
            if kind != "whole":
                em.bind(invars[i], names[i], kind in ("tile", "row"), scalar=kind == "scalar")
        return em

    parts = split_epilogue(make, epilogue, list(jaxpr.outvars), [(invars[i], names[i]) for i in params], probes, taken)
    locals_ = {"y", "tail", "x", "w", "M", "K", "N", "ins", "out", "result", "split", "epilogue"}
    if parts.tail is not None and (locals_ & {names[i] for i in params} or {"y", "tail"} & set(names)):
        raise Unsupported("an input is named like a local of the written kernel")
    body, em = parts.body, parts.emitter
    whole = [i for i, k in zip(params, param_kinds) if k == "whole"]
    if whole and parts.tail is None:
        shape = tuple(invars[whole[0]].aval.shape)
        raise Unsupported(f"an epilogue input of shape {shape} does not tile with the ({M}, {N}) output")
    fused = [(i, k) for i, k in zip(params, param_kinds) if k != "whole"]
    out_shape = tuple(parts.kernel_out.aval.shape)
    if out_shape[:1] != (M,):
        raise Unsupported("the output is not row-aligned with the product")
    reduces = any(p.startswith("reduce_") or p.startswith("arg") for p in body.primitives)
    moves = any(p in body.primitives for p in ("reshape", "squeeze", "expand_dims", "transpose"))
    full_n = reduces or moves or out_shape != (M, N)
    itemsizes = [np_dtype(task.args[lhs.index].dtype).itemsize, np.dtype(jaxpr.outvars[0].aval.dtype).itemsize]
    itemsizes += [np_dtype(task.args[i].dtype).itemsize for i, k in zip(params, param_kinds) if k in ("tile", "row")]
    sublanes = 8 * max(1, 4 // min(itemsizes))
    space = _space(target, M, N, a.aval.shape[1], full_n, sublanes)
    split, split_out = None, ""
    if em.split is not None:  # (groups, group size), and the output's shape, as the kernel reads them from its arguments
        split = tuple(_from_arguments(e, probes.vars) for e in em.split[1:])
        outs = [tuple(e.aval.shape) for e in (t.jaxpr.jaxpr.outvars[0] for t in probes.traces)]
        if parts.tail is not None:  # the kernel writes the fused part's value, not the reference's output
            producer = next(e for e in jaxpr.eqns if parts.kernel_out in e.outvars)
            at = producer.outvars.index(parts.kernel_out)
            outs = [tuple(e.outvars[at].aval.shape) for e in probes.peers(producer)]
        try:
            split_out = _from_arguments(probes.shape(outs), probes.vars)
        except ValueError as exc:
            raise Unsupported(str(exc)) from exc
    src = _render(task, names, probes.used(*body.lines, *body.outputs), body, target, lhs, rhs, w_t,
                  [i for i, _ in fused], [k for _, k in fused], dot, space, full_n, sublanes, out_shape, split,
                  split_out, dtype_expr(parts.kernel_out.aval.dtype))
    if parts.tail is not None:
        src = _with_tail(src, task, parts.tail, [names[i] for i in params], probes.used(*parts.tail.lines,
                                                                                        *parts.tail.outputs))
    fused = Proposal(
        name=f"matmul-epilogue-{target}",
        source=src,
        rationale=f"tiled matmul ({M}x{N}, K={a.aval.shape[1]}) with the epilogue fused "
        f"({', '.join(sorted(p for p in body.primitives if not p.startswith('_'))) or 'none'}); the product never goes "
        "back to HBM before the epilogue" + ("; whole rows per block (the epilogue reduces or reshapes along N)" if full_n else "")
        + ("" if parts.tail is None else "; the work from the first statistic across rows, move of rows or further "
           "matrix product on runs "
           "after the kernel in XLA, on its output"),
        template="matmul",
    )
    splitk = _splitk(task, names, target, lhs, rhs, w_t, dot, params, epilogue, jaxpr, probes, M, N,
                     a.aval.shape[1], sublanes)
    return [fused] if splitk is None else [fused, splitk]


#: the shortest K (at the traced scale) for which the split-K variant is offered: two 128-deep blocks (below it
#: one slab is the whole product)
SPLITK_MIN_K = 256


def _splitk(task: Task, names: list[str], target: str, lhs: Operand, rhs: Operand, w_t: bool, dot: Any,
            params: list[int], epilogue: list[Any], jaxpr: Any, probes: Any, M: int, N: int, K: int,
            sublanes: int) -> Proposal | None:
    """The split-K variant (:mod:`mk.author.matmul_splitk`), or None where it is no real alternative (a short K)
    or cannot be written (the epilogue has no whole-array form, an input named like one of its functions)."""
    if K < SPLITK_MIN_K:
        return None
    local = {"_block", "_divisor", "_partial_kernel", "_splitk_product", "_pow2", "_fit", "_pad_to", "_epilogue",
             "kernel", "epilogue", "partial", "y", "functools", "jax", "jnp", "lax", "pl", "pltpu", "pltriton",
             "SUBLANES", "CONFIG_SPACE"}
    if local & set(names):
        return None
    taken = set(names) | {v.name for v in probes.vars} | local
    try:
        body = whole_epilogue(epilogue, dot.outvars[0], list(jaxpr.outvars),
                              [(jaxpr.invars[i], names[i]) for i in params], probes, taken)
    except Unsupported:
        return None
    sp = {**_space(target, M, N, K, False, sublanes), "k_splits": matmul_splitk.K_SPLITS}
    rows, cols = dot.outvars[0].aval.shape
    src = matmul_splitk.render(task, names, target, lhs, rhs, w_t, [names[i] for i in params], body,
                               probes.used(*body.lines, *body.outputs), sp,
                               config=_config(target, sp, rows, cols, dot.invars[0].aval.shape[1], False, sublanes,
                                              splitk=True),
                               operands=_operand_args(lhs, rhs, w_t, dot))
    return Proposal(
        name=f"matmul-splitk-{target}",
        source=src,
        rationale=f"split-K matmul ({M}x{N}, K={K}): K cut into slabs that are a parallel grid axis, each program an "
        "f32 partial product of one output block; XLA sums the slabs and runs the epilogue "
        f"({', '.join(sorted(p for p in body.primitives if not p.startswith('_'))) or 'none'}) on whole arrays after "
        "the kernel, trading one f32 round trip of the product for parallelism along K",
        template="matmul",
    )


def _with_tail(src: str, task: Task, tail: Any, pnames: list[str], used: list) -> str:
    """``src`` whose kernel applies ``_tail`` (whole-array code after the kernel) to what the kernel returns."""
    lines = src.split("\n")
    at = next(k for k, l in enumerate(lines) if l.startswith("def kernel("))
    end = max(k for k, l in enumerate(lines) if l.startswith("    return "))
    lines[end] = lines[end].replace("    return ", "    y = ", 1)
    lines.insert(end + 1, f"    return tail(y{''.join(', ' + n for n in pnames)})")
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    lines.insert(at + 1, f"    tail = functools.partial(_tail, {bind})" if bind else "    tail = _tail")
    kw = ", ".join(v.name for v in used)
    erf = [*ERF_HELPER.splitlines(), "", ""] if tail.primitives & {"erf", "erfc"} and "def _erf(" not in src else []
    lines[at:at] = [*erf,
                    f"def _tail(y{''.join(', ' + n for n in pnames)}{', *, ' + kw if kw else ''}):",
                    '    """The reference from the first step a block of rows cannot do alone (a statistic across rows, a '
                    'move of rows, a further matrix product) on: whole arrays, after the kernel."""',
                    *[f"    {l}" for l in tail.lines], f"    return {tail.outputs[0]}", "", ""]
    return "\n".join(lines)


def _from_arguments(expr: str, variables: list) -> str:
    """``expr`` (over the variables) with each variable replaced by how the kernel reads it from its arguments."""
    import re

    sources = {v.name: v.source for v in variables}
    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda m: sources.get(m.group(0), m.group(0)), expr)


def _size(probes: Any, values: list[int]) -> str:
    """A size at every probe as source: a number, or an expression over the variables."""
    try:
        return probes.dim(values)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc


def _space(target: str, M: int, N: int, K: int, full_n: bool, sublanes: int) -> dict[str, list[int]]:
    """Block sizes to tune over (:func:`mk.kernels.matmul.config.space`). Each is a request: the kernel fits it to
    the sizes it is called with, so every point is valid at every size."""
    return space(target, _shapes(M, N, K, full_n, sublanes))


def _shapes(M: int, N: int, K: int, full_n: bool, sublanes: int) -> Shapes:
    return Shapes(M, N, K, itemsize=max(1, 32 // sublanes), full_n=full_n)


def _config(target: str, space_: dict[str, list[int]], M: int, N: int, K: int, full_n: bool, sublanes: int,
            splitk: bool = False) -> str:
    """The kernel's keyword defaults: the chip's default tiling (data/hardware.json) over the space's fields."""
    cfg = default(kernel_spec(target), _shapes(M, N, K, full_n, sublanes), splitk)
    return ", ".join(f"{k}={getattr(cfg, k)!r}" for k in sorted(space_, key=_SIGNATURE_ORDER.index))


_SIGNATURE_ORDER = ("block_m", "block_n", "block_k", "k_splits")


def _operand_args(lhs: Operand, rhs: Operand, w_t: bool, dot: Any) -> str:
    """The keyword arguments describing the product to the family's kernels."""
    def casts(op: Operand) -> str:
        return "(" + "".join(f"jnp.{c}, " for c in op.casts).rstrip(" ") + ")"

    return (f"transpose_w={w_t}, x_casts={casts(lhs)}, w_casts={casts(rhs)}, "
            f"product_dtype={dtype_expr(dot.outvars[0].aval.dtype)}, precision={stated_precision(dot)}")


def _render(task: Task, names: list[str], used: list, body, target: str, lhs: Operand, rhs: Operand, w_t: bool,
            params: list[int], kinds: list[str], dot: Any, space: dict[str, list[int]], full_n: bool,
            sublanes: int, jaxpr_out_shape: tuple[int, ...], split: tuple[str, str] | None = None,
            split_out: str = "", out_dtype: str = "") -> str:
    """The written fused kernel: mk/kernels/matmul/{tpu,gpu}.py copied in, the generated ``_epilogue`` and
    ``kernel``, which calls the family's kernel with the epilogue and the parameters' tiling kinds."""
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    fn = "matmul_gpu" if gpu else "matmul_tpu"
    pnames = [names[i] for i in params]
    kwargs = ", ".join(v.name for v in used)
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    M, N = dot.outvars[0].aval.shape
    config = _config(target, space, M, N, dot.invars[0].aval.shape[1], full_n, sublanes)
    cfg_call = ", ".join(f"{k}={k}" for k in sorted(space, key=_SIGNATURE_ORDER.index))
    text = (f"out = epilogue({names[lhs.index]} @ {names[rhs.index]}{'.T' if w_t else ''}"
            + "".join(f", {n}" for n in pnames) + "): the product is accumulated in f32 block by block and the "
            "epilogue runs on each finished block" + (" of whole rows (it reduces or reshapes along N)" if full_n else "")
            + f". The kernel is mk/kernels/matmul/{language_stem(target)}.py, copied below unchanged; only _epilogue is generated "
            "from the reference. Sizes and static values are read from the arguments at trace time; block sizes "
            "are requests, fitted to the sizes the kernel is called with"
            + (" (powers of two for Triton; a size no power of two >= 16 divides is zero-padded, and the padding is "
               "masked out of every reduction)." if gpu else " (multiples of the TPU tile, or the whole axis)."))
    extra = helpers(body.primitives, has_pow2=gpu)
    kinds_expr = "(" + "".join(f"{k!r}, " for k in kinds).rstrip(" ") + ")"
    call_args = ", ".join([names[lhs.index], names[rhs.index], *pnames])
    lines = [
        *file_head(f"mk offline author: tiled matmul with fused epilogue for {task.name} (target {target}).", text,
                   gpu=gpu, space=space),
        "",
        *family_section(module),
        "",
        "",
        *body_helpers(body),
        *extra,
        f"def _epilogue(acc{''.join(', ' + n for n in pnames)}{', *, ' + kwargs if kwargs else ''}):",
        '    """The reference after its matrix product, on one finished block of the product."""',
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        f"def kernel({signature(task, config)}):",
        *([f"    epilogue = functools.partial(_epilogue, {bind})"] if bind else ["    epilogue = _epilogue"]),
        *(["    # the epilogue splits each row into split[0] groups of split[1]: rows are padded group by group, and",
           "    # the epilogue only traces on padded rows, so its output is known from the arguments",
           f"    split = ({split[0]}, {split[1]})",
           f"    out = jax.ShapeDtypeStruct({split_out}, {out_dtype})"] if split else []),
        f"    result = {fn}({call_args}, kinds={kinds_expr}, epilogue=epilogue,",
        f"        {_operand_args(lhs, rhs, w_t, dot)},",
        f"        full_n={full_n},{' split=split, out=out,' if split else ''} {cfg_call})",
        "    return result",
        "",
    ]
    return "\n".join(lines)
