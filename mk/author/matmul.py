"""Matmul template: a tiled matrix product with the reference's epilogue fused.

Applies when the reference is one 2-D ``dot_general`` (``x @ w`` or
``x @ w.T``, casts allowed on the operands) followed by block-local work on
its output: bias, scale, residual, clamp, activations ... taken from the
jaxpr after the dot and emitted by :mod:`mk.author.emit`. TPU: a K-loop over
the grid's last axis with an f32 VMEM accumulator; GPU (Triton): a K-loop
inside the kernel. An epilogue that reduces along N keeps whole rows
(``block_n = N``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import textwrap

import numpy as np

from mk.author.emit import MASKED_HELPER, Emitter, Unsupported, dtype_expr
from mk.author.groups import GroupEmitter, helpers
from mk.author.pooling import PoolEmitter
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author import matmul_splitk
from mk.author.split import split_epilogue, whole_epilogue
from mk.author.trace import Traced
from mk.task import Task, np_dtype
from mk.targets import kernel_language


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
    space = _space(target, M, N, K, False, sublanes)
    src = matmul_splitk.render(task, names, target, lhs, rhs, w_t, dot, [names[i] for i in params], body,
                               probes.used(*body.lines, *body.outputs), space, sublanes)
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
    lines[at:at] = [f"def _tail(y{''.join(', ' + n for n in pnames)}{', *, ' + kw if kw else ''}):",
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


#: block options: TPU multiples of its (8, 128) tile; GPU powers of two (Triton), >= 16 (its smallest dot)
_TPU_OPTS = (128, 256, 512)
_GPU_OPTS = (32, 64, 128)


def _space(target: str, M: int, N: int, K: int, full_n: bool, sublanes: int) -> dict[str, list[int]]:
    """Block sizes to tune over. Each is a request: the kernel fits it to the sizes it is called with (the largest
    legal block dividing the size, at most the request), so every point is valid at every size."""
    if kernel_language(target) == "mosaic":
        bm = [b for b in (8, 16, 32, 64, 128, 256) if b >= sublanes]
        bm = [b for b in bm if b <= max(M, bm[0])][-3:]
        bn = [b for b in _TPU_OPTS if b <= max(N, 128)][-3:]
        bk = [b for b in _TPU_OPTS if b <= max(K, 128)][-3:]
    else:
        bm = [b for b in (16, 32, 64, 128) if b <= max(M, 16)][-3:]
        bn = [b for b in _GPU_OPTS if b <= max(N, 32)][-3:]
        bk = [b for b in (16, 32, 64) if b <= max(K, 16)][-2:]
    space = {"block_m": bm, "block_k": bk}
    if not full_n:
        space["block_n"] = bn
    return space


_TPU_HELPERS = '''def _block(n, want, quantum):
    """The largest multiple of quantum that divides n and is at most want; n itself (one block spanning the axis,
    always a legal block shape) when there is none."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n
'''

_GPU_HELPERS = '''def _block(n, want):
    """(block, padded n): the largest power of two (Triton's rule) >= 16 and at most want that divides n; when
    none does, a power of two block with n zero-padded to a multiple of it."""
    b = 1 << (want.bit_length() - 1)
    while b >= 16:
        if n % b == 0:
            return b, n
        b //= 2
    b = max(16, min(1 << (want.bit_length() - 1), 1 << (n - 1).bit_length()))
    return b, -(-n // b) * b


def _pad_to(x, shape):
    widths = [(0, t - s) for s, t in zip(x.shape, shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x
'''

_GPU_SPLIT_HELPERS = '''def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _pad_groups(x, axis, split):
    """x with its axis (split[0] groups of split[1]) padded group by group: each group to a power of two, then the
    number of groups, so the epilogue's reshape into groups splits the padded block the same way."""
    groups, size = split
    shape = x.shape[:axis] + (groups, size) + x.shape[axis + 1:]
    widths = [(0, 0)] * axis + [(0, _pow2(groups) - groups), (0, _pow2(size) - size)] + [(0, 0)] * (x.ndim - axis - 1)
    padded = jnp.pad(x.reshape(shape), widths)
    return padded.reshape(x.shape[:axis] + (_pow2(groups) * _pow2(size),) + x.shape[axis + 1:])
'''


def _render(task: Task, names: list[str], used: list, body, target: str, lhs: Operand, rhs: Operand, w_t: bool,
            params: list[int], kinds: list[str], dot: Any, space: dict[str, list[int]], full_n: bool,
            sublanes: int, jaxpr_out_shape: tuple[int, ...], split: tuple[str, str] | None = None,
            split_out: str = "", out_dtype: str = "") -> str:
    gpu = kernel_language(target) == "triton"
    acc_dtype = dtype_expr(dot.outvars[0].aval.dtype)
    prec = dot.params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    lcast = "".join(f".astype(jnp.{c})" for c in lhs.casts)
    rcast = "".join(f".astype(jnp.{c})" for c in rhs.casts)
    dims = f"(((1,), ({1 if w_t else 0},)), ((), ()))"
    pnames = [names[i] for i in params]
    kwargs = ", ".join(v.name for v in used)
    bind = ", ".join(f"{v.name}={v.source}" for v in used)
    loads = []
    for j, (i, kind) in enumerate(zip(params, kinds)):
        nd = len(task.args[i].shape)
        if kind == "scalar":  # a number (from SMEM on TPU); the epilogue treats it as one
            loads.append(f"p_refs[{j}][0, 0]")
        elif kind == "col":
            loads.append(f"p_refs[{j}][...]" + (".reshape(p_refs[{j}].shape[-1:])".format(j=j) if nd == 1 else ""))
        elif kind == "row":
            loads.append(f"p_refs[{j}][...]" + ("[:, 0]" if nd == 1 else ""))
        else:
            loads.append(f"p_refs[{j}][...]")
    block_n_default = space["block_n"][-1] if "block_n" in space else None
    config = f"block_m={space['block_m'][-1]}" + (f", block_n={block_n_default}" if block_n_default else "") + \
        f", block_k={space['block_k'][-1]}"
    text = (f"out = epilogue({names[lhs.index]} @ {names[rhs.index]}{'.T' if w_t else ''}"
            + "".join(f", {n}" for n in pnames) + "): the product is accumulated in f32 block by block and the "
            "epilogue runs on each finished block" + (" of whole rows (it reduces or reshapes along N)" if full_n else "")
            + ". Sizes and static values are read from the arguments at trace time; block sizes are requests, fitted "
            "to the sizes the kernel is called with"
            + (" (powers of two for Triton; a size no power of two >= 16 divides is zero-padded, and the padding is "
               "masked out of every reduction)." if gpu else " (multiples of the TPU tile, or the whole axis)."))
    doc = [f'"""mk offline author: tiled matmul with fused epilogue for {task.name} (target {target}).', "",
           *textwrap.wrap(text, 110), '"""']
    header = doc + [
        "import functools",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.experimental import pallas as pl",
        "from jax.experimental.pallas import triton as pltriton" if gpu else "from jax.experimental.pallas import tpu as pltpu",
        "",
        f"CONFIG_SPACE = {space!r}",
        *(["#: rows per sublane tile of the narrowest row dtype (8 for 32-bit, 16 for 16-bit)", f"SUBLANES = {sublanes}"]
          if not gpu else []),
        "",
        "",
        f"def _epilogue(acc{''.join(', ' + n for n in pnames)}{', *, ' + kwargs if kwargs else ''}):",
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        *([*MASKED_HELPER.splitlines(), "", ""] if "_masked" in body.primitives else []),
        *(_GPU_HELPERS if gpu else _TPU_HELPERS).splitlines(),
        *(["", "", *_GPU_SPLIT_HELPERS.splitlines()] if split else []),
        *(["", "", *helpers(body.primitives, has_pow2=bool(split))] if helpers(body.primitives, bool(split)) else []),
        "",
        "",
        "def _finish(acc, p_refs, o_ref, epilogue):",
        f"    out = epilogue(acc.astype({acc_dtype}){''.join(', ' + l for l in loads)})",
        "    out = out.reshape(out.shape + (1,)) if out.ndim == 1 else out",
        "    o_ref[...] = jnp.broadcast_to(out, o_ref.shape).astype(o_ref.dtype)",
        "",
        "",
    ]
    if not gpu:
        kern = [
            "def _kernel(x_ref, w_ref, *refs, nk, epilogue):",
            "    p_refs, o_ref, acc_ref = refs[:-2], refs[-2], refs[-1]",
            "",
            "    @pl.when(pl.program_id(2) == 0)",
            "    def _zero():",
            "        acc_ref[...] = jnp.zeros_like(acc_ref)",
            "",
            f"    acc_ref[...] += lax.dot_general(x_ref[...]{lcast}, w_ref[...]{rcast}, {dims},",
            f"                                    precision={prec_expr}, preferred_element_type=jnp.float32)",
            "",
            "    @pl.when(pl.program_id(2) == nk - 1)",
            "    def _store():",
            "        _finish(acc_ref[...], p_refs, o_ref, epilogue)",
        ]
    else:
        w_slice = ":, pl.ds(k * block_k, block_k)" if w_t else "pl.ds(k * block_k, block_k), :"
        kern = [
            "def _kernel(x_ref, w_ref, *refs, nk, block_k, block_n, epilogue):",
            "    p_refs, o_ref = refs[:-1], refs[-1]",
            "",
            "    def step(k, acc):",
            "        x = x_ref[:, pl.ds(k * block_k, block_k)]",
            f"        w = w_ref[{w_slice}]",
            f"        return acc + lax.dot_general(x{lcast}, w{rcast}, {dims},",
            f"                                     precision={prec_expr}, preferred_element_type=jnp.float32)",
            "",
            "    acc = lax.fori_loop(0, nk, step, jnp.zeros((x_ref.shape[0], block_n), jnp.float32))",
            "    _finish(acc, p_refs, o_ref, epilogue)",
        ]
    elementwise = tuple(jaxpr_out_shape) == (dot.outvars[0].aval.shape[0], dot.outvars[0].aval.shape[1])
    grid = "m, n: " if gpu else "m, n, k: "
    arrays, specs = [], []
    for i, kind in zip(params, kinds):
        p = f"ins[{i}]"
        if kind == "scalar":
            arrays.append(f"{p}.reshape((1, 1)),  # {names[i]}: one number")
            specs.append("pl.BlockSpec((1, 1), lambda m, n: (0, 0))," if gpu else
                         "pl.BlockSpec((1, 1), lambda m, n, k: (0, 0), memory_space=pltpu.SMEM),")
        elif kind == "col":
            arrays.append((f"_pad_groups({p}.reshape((1, N)), 1, split)," if split else
                           f"_pad_to({p}.reshape((1, N)), (1, n_pad))," if gpu else f"{p}.reshape((1, N)),")
                          + f"  # {names[i]}: one value per column")
            specs.append(f"pl.BlockSpec((1, block_n), lambda {grid}(0, n)),")
        elif kind == "row":
            arrays.append((f"_pad_to({p}.reshape((M, 1)), (m_pad, 1))," if gpu else f"{p}.reshape((M, 1)),")
                          + f"  # {names[i]}: one value per row")
            specs.append(f"pl.BlockSpec((block_m, 1), lambda {grid}(m, 0)),")
        else:
            arrays.append((f"_pad_groups(_pad_to({p}, (m_pad, N)), 1, split)," if split else
                           f"_pad_to({p}, (m_pad, n_pad))," if gpu else f"{p},") + f"  # {names[i]}: one value per output")
            specs.append(f"pl.BlockSpec((block_m, block_n), lambda {grid}(m, n)),")
    listing = ["    p_arrays = [", *[f"        {a}" for a in arrays], "    ]", "    p_specs = [",
               *[f"        {sp}" for sp in specs], "    ]"] if params else ["    p_arrays, p_specs = [], []"]
    rows = "m_pad" if gpu else "M"
    if elementwise:
        out_lines = [f"    out_spec = pl.BlockSpec((block_m, block_n), lambda {grid}(m, n))",
                     f"    out_shape = ({rows}, {'n_pad' if gpu else 'N'})"]
    else:
        out_lines = ["    # the epilogue reduced along N: each block of whole rows writes its out_cols columns",
                     "    out_cols = out.shape[1] if out.ndim == 2 else 1",
                     f"    out_spec = pl.BlockSpec((block_m, out_cols), lambda {grid}(m, 0))",
                     f"    out_shape = ({rows}, out_cols)"]
    call = [
        "",
        "",
        f"def kernel({signature(task, config)}):",
        *([f"    epilogue = functools.partial(_epilogue, {bind})"] if bind else ["    epilogue = _epilogue"]),
        f"    ins = ({', '.join(names)}{',' if len(names) == 1 else ''})",
        *(["    # the epilogue splits each row into split[0] groups of split[1]: rows are padded group by group, and",
           "    # the epilogue only traces on padded rows, so its output is known from the arguments",
           f"    split = ({split[0]}, {split[1]})",
           f"    out = jax.ShapeDtypeStruct({split_out}, {out_dtype})"] if split else []),
        f"    x, w = ins[{lhs.index}], ins[{rhs.index}]",
        "    M, K = x.shape",
        f"    N = w.shape[{0 if w_t else 1}]",
        *([] if split else
          [f"    out = jax.eval_shape(epilogue, jax.ShapeDtypeStruct((M, N), {acc_dtype}),"
           f" {''.join(f'ins[{i}], ' for i in params)})".replace(", )", ")")]),
    ]
    if not gpu:
        call += [
            "    block_m = _block(M, block_m, SUBLANES)",
            "    block_n = " + ("N  # whole rows" if full_n else "_block(N, block_n, 128)"),
            "    block_k = _block(K, block_k, 128)",
            *listing,
            *out_lines,
            "    w_spec = " + ("pl.BlockSpec((block_n, block_k), lambda m, n, k: (n, k))" if w_t
                           else "pl.BlockSpec((block_k, block_n), lambda m, n, k: (k, n))"),
            "    result = pl.pallas_call(",
            "        functools.partial(_kernel, nk=K // block_k, epilogue=epilogue),",
            "        grid=(M // block_m, N // block_n, K // block_k),",
            "        in_specs=[pl.BlockSpec((block_m, block_k), lambda m, n, k: (m, k)), w_spec, *p_specs],",
            "        out_specs=out_spec,",
            "        out_shape=jax.ShapeDtypeStruct(out_shape, out.dtype),",
            "        scratch_shapes=[pltpu.VMEM((block_m, block_n), jnp.float32)],",
            "        compiler_params=pltpu.CompilerParams(dimension_semantics=('parallel', 'parallel', 'arbitrary')),",
            "    )(x, w, *p_arrays)",
            "    return result.reshape(out.shape)",
            "",
        ]
    else:
        call += [
            "    block_m, m_pad = _block(M, block_m)",
            "    block_k, k_pad = _block(K, block_k)",
            *(["    block_n = n_pad = _pow2(split[0]) * _pow2(split[1])  # whole rows, padded group by group",
               f"    w = _pad_groups(w, {0 if w_t else 1}, split)"] if split else
              ["    " + ("block_n = n_pad = max(16, 1 << (N - 1).bit_length())  # whole (padded) rows"
                       if full_n else "block_n, n_pad = _block(N, block_n)")]),
            "    x = _pad_to(x, (m_pad, k_pad))",
            "    w = _pad_to(w, " + ("(n_pad, k_pad))" if w_t else "(k_pad, n_pad))"),
            *listing,
            *out_lines,
            "    w_spec = " + ("pl.BlockSpec((block_n, k_pad), lambda m, n: (n, 0))" if w_t
                           else "pl.BlockSpec((k_pad, block_n), lambda m, n: (0, n))"),
            "    result = pl.pallas_call(",
            "        functools.partial(_kernel, nk=k_pad // block_k, block_k=block_k, block_n=block_n, epilogue=epilogue),",
            "        grid=(m_pad // block_m, n_pad // block_n),",
            "        in_specs=[pl.BlockSpec((block_m, k_pad), lambda m, n: (m, 0)), w_spec, *p_specs],",
            "        out_specs=out_spec,",
            "        out_shape=jax.ShapeDtypeStruct(out_shape, out.dtype),",
            "        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),",
            "    )(x, w, *p_arrays)",
            ("    return result[:M].reshape((M, _pow2(split[0]), _pow2(split[1])))[:, :split[0], :split[1]]"
             ".reshape(out.shape)" if split and elementwise else
             "    return result[:M, :" + ("N" if elementwise else "out_cols") + "].reshape(out.shape)"),
            "",
        ]
    return "\n".join(header + kern + call)
