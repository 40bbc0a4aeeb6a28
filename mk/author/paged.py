"""Paged decode-attention recogniser, bound to :mod:`mk.kernels.paged_attention`.

Applies when the reference reads a paged KV cache: one rank-3 float query
input (T, Hq, D), two float page inputs of one shape (P, page, Hkv, D), an
int page table (N, pages), int lengths (N,) and optionally int query offsets
(N + 1,) (``cu_q_lens``: sequence n's query is row cu_q_lens[n]; without
them, row n), nothing else, and one output (N, Hq, D). The score scale is the
scalar factor on the first product's output (an expression of the sizes and
statics, :mod:`mk.author.probe`). The semantics (which page input is K, the
query rows, the length mask ``t < lengths[n]``, the scale, grouped heads) are
then checked by running the reference on a float32 copy of a random case with
scattered pages and random lengths, else the recogniser declines.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mk.author.emit import family_section, file_head, language_stem, Unsupported
from mk.author.ir import Program, from_jaxpr
from mk.author.probe import arg_names, probes_for, signature, static_names
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.kernels.paged_attention import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec

_DEFINED = {"paged_attention_tpu", "paged_attention_gpu", "_paged_tpu_kernel", "_paged_gpu_kernel",
            "_largest_divisor", "_pow2", "_MASKED", "SCORE_DTYPE", "scale", "q"}


def _roles(task: Task, shapes: list[tuple[int, ...]]) -> dict[str, int | None]:
    floats = [i for i, a in enumerate(task.args) if np.issubdtype(np_dtype(a.dtype), np.floating)
              or np_dtype(a.dtype).name == "bfloat16"]
    ints = [i for i, a in enumerate(task.args) if np.issubdtype(np_dtype(a.dtype), np.integer)]
    if len(floats) + len(ints) != len(task.args):
        raise Unsupported("an input is neither float nor int")
    queries = [i for i in floats if len(shapes[i]) == 3]
    pages = [i for i in floats if len(shapes[i]) == 4]
    if len(queries) != 1 or len(pages) != 2 or len(floats) != 3 or shapes[pages[0]] != shapes[pages[1]]:
        raise Unsupported("paged attention reads one rank-3 query input and two page inputs of one rank-4 shape")
    (t, hq, d), (_, _, hkv, pd) = shapes[queries[0]], shapes[pages[0]]
    if pd != d or hq % hkv:
        raise Unsupported(f"pages {shapes[pages[0]]} do not match queries {shapes[queries[0]]} (P, page, Hkv, D)")
    tables = [i for i in ints if len(shapes[i]) == 2]
    if len(tables) != 1:
        raise Unsupported("paged attention reads one int page table (N, pages)")
    n = shapes[tables[0]][0]
    lengths = [i for i in ints if shapes[i] == (n,)]
    offsets = [i for i in ints if shapes[i] == (n + 1,)]
    if len(lengths) != 1 or len(offsets) > 1 or len(ints) != 2 + len(offsets):
        raise Unsupported("paged attention reads one int length per sequence (N,) and at most query offsets (N + 1,)")
    if not offsets and t != n:
        raise Unsupported("without query offsets there must be one query row per sequence")
    return {"q": queries[0], "k": pages[0], "v": pages[1], "table": tables[0], "lengths": lengths[0],
            "offsets": offsets[0] if offsets else None}


def score_scale(prog: Program) -> float:
    """The product of the scalar factors on the first product's output, up to its row max (or the next product)."""
    dots = [op for op in prog.ops if op.prim == "dot_general"]
    start = prog.ops.index(dots[0])
    scale, cur = 1.0, {id(dots[0].out)}
    for op in prog.ops[start + 1:]:
        if op.prim in ("reduce_max", "dot_general"):
            break
        if not any(id(x) in cur for x in op.ins):
            continue
        consts = [x for x in op.ins if x.is_const and x.shape == ()]
        if op.prim == "mul" and len(consts) == 1:
            scale *= float(consts[0].const)
        elif op.prim == "div" and len(consts) == 1 and op.ins[1] is consts[0]:
            scale /= float(consts[0].const)
        cur.add(id(op.out))
    return scale


def score_scale_expr(probes: Any, scale: float, dtype: Any) -> str:
    """The score scale as an expression of the sizes and statics, fitted over every probe's trace (the same number
    when it does not change with them); Unsupported when it changes and no expression fits."""
    scales = [scale] + [score_scale(from_jaxpr(t.jaxpr)) for t in probes.traces[1:]]
    expr = probes.fit(scales, dtype=dtype)
    if expr is not None:
        return expr
    if not all(math.isclose(x, scale, rel_tol=1e-6) for x in scales):
        raise Unsupported(f"the score scale changes with the sizes ({scales}) and is not a function of them")
    return repr(float(scale))


def _intended(xs: list[np.ndarray], roles: dict[str, int | None], scale: float, use_offsets: bool) -> np.ndarray:
    q, kp, vp = (np.asarray(xs[roles[r]], np.float64) for r in ("q", "k", "v"))
    table, lengths = np.asarray(xs[roles["table"]]), np.asarray(xs[roles["lengths"]])
    n = table.shape[0]
    rows = np.asarray(xs[roles["offsets"]])[:n] if use_offsets else np.arange(n)
    hq, hkv = q.shape[1], kp.shape[2]
    out = np.zeros((n, hq, q.shape[2]))
    for i in range(n):
        k = kp[table[i]].reshape(-1, hkv, q.shape[2])[: lengths[i]]
        v = vp[table[i]].reshape(-1, hkv, q.shape[2])[: lengths[i]]
        k, v = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
        s = np.einsum("hd,thd->ht", q[rows[i]], k) * scale
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[i] = np.einsum("ht,thd->hd", p / p.sum(axis=1, keepdims=True), v)
    return out


def _verify(task: Task, scale_name: str, roles: dict[str, int | None], scale: float) -> dict[str, int | None]:
    """The roles (K and V possibly swapped) under which the reference is paged attention on a random case."""
    import jax

    xs = [np.asarray(x) for x in task.make_inputs(scale_name, 7, "normal")]
    xs = [x.astype(np.float32) if not np.issubdtype(x.dtype, np.integer) else x for x in xs]
    if np.any(np.asarray(xs[roles["lengths"]]) < 1):
        raise Unsupported("a probe case has an empty sequence")
    try:
        ref = np.asarray(jax.jit(task.bind(task.reference, scale_name))(*xs), np.float64)
    except Exception as e:  # noqa: BLE001 - a reference that rejects float32 copies cannot be probed
        raise Unsupported(f"could not run the reference on float32 inputs ({type(e).__name__}: {e})") from e
    bound = 2e-3 * float(np.abs(ref).max()) + 1e-5
    errs = []
    for swap in (False, True):
        r = dict(roles, k=roles["v"], v=roles["k"]) if swap else roles
        want = _intended(xs, r, scale, r["offsets"] is not None)
        if want.shape != ref.shape:
            raise Unsupported(f"the reference's output {ref.shape} is not the paged attention output {want.shape}")
        errs.append(float(np.abs(want - ref).max()))
        if errs[-1] <= bound:
            return r
    raise Unsupported(f"the reference is not length-masked paged decode attention with scale {scale:g}: on a probe "
                      f"input it differs by {min(errs):.3g} (bound {bound:.3g})")


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    if not kernel_language(target):
        raise Unsupported(f"the paged-attention recogniser writes Pallas TPU and GPU kernels, not {target!r}")
    t0 = traced[0]
    roles = _roles(task, t0.shapes)
    prog = from_jaxpr(t0.jaxpr)
    if len(prog.outs) != 1:
        raise Unsupported("paged attention writes one output")
    if sum(op.prim == "dot_general" for op in prog.ops) != 2:
        raise Unsupported("paged attention has two products (scores, then values), found "
                          f"{sum(op.prim == 'dot_general' for op in prog.ops)}")
    scale = score_scale(prog)
    small = min(traced, key=lambda t: sum(math.prod(x) for x in t.shapes))  # the reference runs here, on the CPU
    if small is t0:
        roles = _verify(task, t0.scale, roles, scale)
    else:  # the roles are argument positions, the same at every scale
        roles = _verify(task, small.scale, _roles(task, small.shapes), score_scale(from_jaxpr(small.jaxpr)))
    dot = next(op for op in prog.ops if op.prim == "dot_general")
    sd = np.dtype(dot.out.dtype).name
    score_dtype = f"jnp.{sd}" if sd in ("bfloat16", "float16") else "None"
    probes = probes_for(task, traced)
    scale_expr = score_scale_expr(probes, scale, dot.out.dtype)
    names = arg_names(task)
    if set(names) & _DEFINED:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & _DEFINED)}")
    (n, pages), (_, page, hkv, d) = t0.shapes[roles["table"]], t0.shapes[roles["k"]]
    shapes = Shapes(n, t0.shapes[roles["q"]][1], hkv, d, page, pages, np_dtype(task.args[roles["k"]].dtype).itemsize)
    return Proposal(
        name=f"paged-attention-{target}",
        source=_render(task, names, roles, probes.used(scale_expr), scale_expr, score_dtype, target, shapes),
        rationale=f"paged decode attention ({n} sequences, {shapes.heads} query / {hkv} kv heads, pages of {page}, "
        f"scale {scale_expr}): "
        + ("page table and lengths in scalar prefetch, each page DMA'd straight from the cache by the index maps, "
           "pages past a sequence's length skipped, online softmax in VMEM scratch" if kernel_language(target) == "mosaic"
           else "one Triton program per (sequence, kv head) loops over the sequence's pages up to its length with an "
           "online softmax in registers"),
        template="paged",
    )


def _render(task: Task, names: list[str], roles: dict[str, int | None], used: list, scale_expr: str,
            score_dtype: str, target: str, shapes: Shapes) -> str:
    gpu = kernel_language(target) == "triton"
    config = default(kernel_spec(target), shapes).kwargs(target)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    q, kp, vp, table, lengths = (names[roles[r]] for r in ("q", "k", "v", "table", "lengths"))
    rows = (f"{q}[{names[roles['offsets']]}[:{table}.shape[0]]]  # sequence n's query row is {names[roles['offsets']]}[n]"
            if roles["offsets"] is not None else f"{q}  # one query row per sequence")
    unused = [s for s in static_names(task) if s not in {v.name for v in used} and s not in scale_expr]
    text = (f"out[n] = softmax({q}[row n] . K_n^T * scale, t < {lengths}[n]) V_n with K_n/V_n the slots of pages "
            f"{table}[n] of {kp}/{vp}. The kernel is mk/kernels/paged_attention/{language_stem(target)}.py, copied below unchanged; "
            "sizes are read from the arguments at trace time.")
    lines = [
        *file_head(f"mk offline author: paged decode attention for {task.name} (target {target}).", text, gpu=gpu,
                   space=space(target, shapes)),
        "",
        *family_section(gpu_kernel if gpu else tpu_kernel),
        "",
        f"SCORE_DTYPE = {score_dtype}",
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        *([f"    del {', '.join(unused)}  # the kernel reads every size from the arguments"] if unused else []),
        *[f"    {v.name} = {v.source}" for v in used if v.name != v.source],
        f"    scale = {scale_expr}",
        f"    q = {rows}",
        f"    return paged_attention_{'gpu' if gpu else 'tpu'}(q, {kp}, {vp}, {lengths}, {table}, scale=scale, "
        f"score_dtype=SCORE_DTYPE, {cfg_call})",
        "",
    ]
    return "\n".join(lines)
