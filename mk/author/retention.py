"""Decayed-retention recogniser: RetNet's parallel retention and Mamba-2's quadratic SSD, bound to
:mod:`mk.kernels.retention`.

Recognised from the flattened reference (:mod:`mk.author.ir`), walking back from its one output:

* ``out = dot(cast(s / den), v)`` over (B, H) batch axes, ``v`` an input;
* ``s = (q . k) * decay``, the score product over (B, H) of two inputs (or their casts);
* ``den`` a function of ``sum_j pre(s)``, the row sum over the last axis (``pre`` and the function after it
  elementwise: RetNet's ``max(sum |s|, 1)``, Mamba-2's ``max(|sum s|, 1)`` with its ``where``);
* ``decay = exp(c_i - c_j)`` below the diagonal and 0 above it, in one of two forms: built from
  ``c[..., :, None] - c[..., None, :]`` of a (B, H, S) value ``c`` of the inputs (Mamba-2: ``cumsum(log a)``),
  or depending on no input, ``exp(lg_h * (i - j))`` with a per-head vector ``lg`` (RetNet's ``log gamma``).

The decay found is checked numerically against ``exp(c_i - c_j)`` at the authoring size before a kernel is
written. ``c`` (or ``lg``) is computed in plain JAX from the reference's own ops (sizes as expressions of the
arguments); ``pre`` and the divisor are emitted from its ops into two small functions the kernel calls.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from mk.author.emit import _BINARY, _UNARY, dtype_expr, exact_form, family_section, file_head, language_stem, Unsupported
from mk.author.ir import ELEMENTWISE, Op, Program, Val, _Dims, _expr, from_jaxpr
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.kernels.retention import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec

#: names the copied kernel modules and the written epilogue define
_DEFINED = {"retention_tpu", "retention_gpu", "_abs", "_clamp_one", "_scores", "_stream_kernel", "_resident_kernel",
            "_block", "_pow2", "_fit", "_row_divisor", "_values", "_fused_kernel", "_one_pass_kernel",
            "_pre", "_post", "log_decay", "lg"}


# --- walking the program ----------------------------------------------------------------------------------------
def _dot(op: Op | None, contract: tuple[int, int]) -> bool:
    if op is None or op.prim != "dot_general":
        return False
    (lc, rc), (lb, rb) = op.params["dimension_numbers"]
    return (tuple(lc), tuple(rc)) == ((contract[0],), (contract[1],)) and tuple(lb) == (0, 1) == tuple(rb) \
        and all(len(v.shape) == 4 for v in op.ins)


def _slice(vals: list[Val], prod: dict[int, Op], stop: set[int] = frozenset()) -> list[Op]:
    """The ops computing ``vals`` (not past ``stop``), in program order."""
    seen: dict[int, Op] = {}
    todo = list(vals)
    while todo:
        v = todo.pop()
        if id(v) in stop or id(v) not in prod or id(prod[id(v)]) in seen:
            continue
        op = prod[id(v)]
        seen[id(op)] = op
        todo.extend(op.ins)
    return list(seen.values())


def _in_order(prog: Program, ops: list[Op]) -> list[int]:
    ids = {id(o) for o in ops}
    return [k for k, o in enumerate(prog.ops) if id(o) in ids]


def _reads_input(vals: list[Val], prod: dict[int, Op]) -> bool:
    ops = _slice(vals, prod)
    return any(v.arg is not None for v in vals) or any(i.arg is not None for o in ops for i in o.ins)


def _arg_or_cast(v: Val, prod: dict[int, Op]) -> tuple[int, Any]:
    """(input index, dtype it is cast to or None) of an input or its cast."""
    if v.arg is not None:
        return v.arg, None
    op = prod.get(id(v))
    if op is not None and op.prim == "convert_element_type" and op.ins[0].arg is not None:
        return op.ins[0].arg, op.out.dtype
    raise Unsupported("a score or value operand that is not an input (or its cast)")


def _peel_bcast(v: Val, prod: dict[int, Op]) -> Val:
    """``v`` through broadcasts that only add axes of size 1."""
    while id(v) in prod and prod[id(v)].prim in ("broadcast_in_dim", "reshape"):
        src = prod[id(v)].ins[0]
        if [d for d in src.shape if d != 1] != [d for d in v.shape if d != 1]:
            break
        v = src
    return v


# --- elementwise chains as block code -----------------------------------------------------------------------
def _chain(ops: list[Op], start: Val, name: str, end: Val) -> list[str]:
    """Block-local lines computing ``end`` from ``start`` (bound to ``name``) by elementwise ops; broadcasts that
    only add size-1 axes (or broadcast a number) are the identity in a block."""
    names = {id(start): name}
    lines: list[str] = []
    for k, op in enumerate(ops):
        ins = []
        for v in op.ins:
            if id(v) in names:
                ins.append(names[id(v)])
            elif v.is_const and v.size == 1 or v.is_const and v.shape == ():
                ins.append(f"jnp.asarray({v.const!r}, {dtype_expr(v.dtype)})")
            else:
                raise Unsupported("the row normaliser reads a value other than the scores and numbers")
        out = f"{name}{k}"
        if op.prim in ("broadcast_in_dim", "reshape"):
            src, dst = op.ins[0], op.out
            if src.shape != () and [d for d in src.shape if d != 1] != [d for d in dst.shape if d != 1]:
                raise Unsupported("the row normaliser broadcasts along an axis")
            names[id(op.out)] = ins[0]
            continue
        exact = exact_form(op.prim, op.params, op.out.dtype, ins)
        if exact is not None:
            expr = exact
        elif op.prim in _UNARY:
            expr = _UNARY[op.prim].format(*ins)
        elif op.prim in _BINARY:
            expr = _BINARY[op.prim].format(*ins)
        elif op.prim == "convert_element_type":
            expr = f"jnp.asarray({ins[0]}).astype({dtype_expr(op.params['new_dtype'])})"
        elif op.prim == "select_n" and len(ins) == 3:
            expr = f"jnp.where({ins[0]}, {ins[2]}, {ins[1]})"
        elif op.prim == "integer_pow":
            expr = f"lax.integer_pow({ins[0]}, {int(op.params['y'])})"
        else:
            raise Unsupported(f"the row normaliser uses {op.prim!r}, which is not elementwise")
        lines.append(f"{out} = {expr}")
        names[id(op.out)] = out
    if id(end) not in names:
        raise Unsupported("the row normaliser does not reach the divisor")
    return lines + [f"return {names[id(end)]}"]


# --- plain-JAX slices (cumsum allowed) --------------------------------------------------------------------------
def _render(programs: list[Program], probes: Any, names: list[str], idx: list[int], outs: list[int],
            taken: set[str], seed: dict[int, str] | None = None, prefix: str = "v") -> tuple[list[str], list[str]]:
    """Whole-array lines for ops ``idx`` of each program (the same structure), and the names of ``outs``.
    ``seed``: names already bound to values of the first program (by id); ``lax.cumsum`` and ``lax.top_k`` (the
    ``top_k`` / ``top_k_idx`` ops of :func:`mk.author.moe.flatten`) are written too."""
    dims = _Dims(probes)
    p0 = programs[0]
    vnames = (f"{prefix}{k}" for k in range(10**6) if f"{prefix}{k}" not in taken)
    values: dict[int, str] = {id(v): names[v.arg] for v in p0.args}
    values.update(seed or {})
    lines: list[str] = []

    def ref(vals: list[Val]) -> str:
        v = vals[0]
        if v.is_const:
            num = dims.number([x.const for x in vals], v.dtype)
            if v.shape == ():
                return f"jnp.asarray({num}, {dtype_expr(v.dtype)})"
            return f"jnp.full({dims.shape([x.shape for x in vals])}, {num}, {dtype_expr(v.dtype)})"
        return values[id(v)]

    for k in idx:
        peers = [p.ops[k] for p in programs]
        op = peers[0]
        ins = [ref([q.ins[j] for q in peers]) for j in range(len(op.ins))]
        if op.prim == "cumsum":
            expr = f"lax.cumsum({ins[0]}, axis={int(op.params['axis'])}, reverse={bool(op.params['reverse'])})"
        elif op.prim in ("top_k", "top_k_idx"):
            try:
                kexpr = probes.dim([int(q.params["k"]) for q in peers])
            except ValueError as exc:
                raise Unsupported(str(exc)) from exc
            axis = int(op.params.get("axis", -1))
            expr = f"lax.top_k({ins[0]}, {kexpr}, axis={axis})[{int(op.prim == 'top_k_idx')}]"
        else:
            expr = _expr(op, ins, dims.shape([q.out.shape for q in peers]))
        name = next(vnames)
        lines.append(f"{name} = {expr}")
        values[id(op.out)] = name
    return lines, [values[id(p0.ops[k].out)] for k in outs]


def _evaluate(prog: Program, inputs: list[Any], want: list[Val]) -> list[np.ndarray]:
    """The values ``want`` at concrete ``inputs``, by binding the program's ops (its slice only)."""
    prod = prog.producers()
    env: dict[int, Any] = {id(v): x for v, x in zip(prog.args, inputs)}

    def get(v: Val) -> Any:
        if id(v) in env:
            return env[id(v)]
        if v.is_const:
            return np.full(v.shape, v.const, v.dtype)
        raise Unsupported("the decay reads a value it does not define")

    for op in sorted(_slice(want, prod), key=lambda o: prog.ops.index(o)):
        if op.prim in ("top_k", "top_k_idx"):
            from jax import lax

            got = lax.top_k(get(op.ins[0]), int(op.params["k"]), axis=int(op.params.get("axis", -1)))
            env[id(op.out)] = got[int(op.prim == "top_k_idx")]
            continue
        env[id(op.out)] = op.bind.bind(*[get(v) for v in op.ins], **op.params)
    return [np.asarray(np.asarray(get(v)).astype(np.float64)) for v in want]


# --- the template -----------------------------------------------------------------------------------------------
def _find(prog: Program) -> dict[str, Any]:
    prod = prog.producers()
    if len(prog.outs) != 1:
        raise Unsupported("the retention template writes one output")
    final = prod.get(id(prog.outs[0]))
    if not _dot(final, (3, 2)):
        raise Unsupported("the output is not a (B, H) batched product of scores and values")
    pv, v_val = final.ins
    if v_val.arg is None:
        raise Unsupported("the value operand is not an input")
    pv_dtype = pv.dtype
    cast = prod.get(id(pv))
    p = cast.ins[0] if cast is not None and cast.prim == "convert_element_type" else pv
    div = prod.get(id(p))
    if div is None or div.prim != "div" or div.ins[1].shape[-1] != 1:
        raise Unsupported("the scores are not divided by a per-row normaliser")
    s, den = div.ins
    mul = prod.get(id(s))
    if mul is None or mul.prim != "mul":
        raise Unsupported("the scores are not a product of q.k and a decay")
    qk_i = next((n for n, x in enumerate(mul.ins) if _dot(prod.get(id(x)), (3, 3))), None)
    if qk_i is None:
        raise Unsupported("no (B, H) batched q.k product in the scores")
    qk = prod[id(mul.ins[qk_i])]
    decay = mul.ins[1 - qk_i]
    q, k = (_arg_or_cast(x, prod) for x in qk.ins)
    b, h, s_len, _ = qk.ins[0].shape
    # the row sum: den is a function of reduce_sum(pre(s), axes=(3,)) only
    post_ops = _slice([den], prod)
    sums = [o for o in post_ops if o.prim == "reduce_sum"]
    if len(sums) != 1 or tuple(sums[0].params["axes"]) != (3,):
        raise Unsupported("the normaliser is not a function of one row sum over the key axis")
    rsum = sums[0]
    post_ops = [o for o in _slice([den], prod, {id(rsum.out)}) if o is not rsum]
    pre_ops = _slice([rsum.ins[0]], prod, {id(s)})
    for o in post_ops + pre_ops:
        if o.prim not in ELEMENTWISE and o.prim not in ("broadcast_in_dim", "reshape"):
            raise Unsupported(f"the row normaliser uses {o.prim!r}, which is not elementwise")
    order = {id(o): n for n, o in enumerate(prog.ops)}
    post_ops.sort(key=lambda o: order[id(o)])
    pre_ops.sort(key=lambda o: order[id(o)])
    return {"prod": prod, "final": final, "v": v_val.arg, "pv_dtype": pv_dtype, "q": q, "k": k, "qk": qk,
            "decay": decay, "rsum": rsum, "s": s, "den": den, "pre": pre_ops, "post": post_ops,
            "shape": (b, h, s_len), "order": order}


def _decay_form(prog: Program, found: dict[str, Any]) -> tuple[str, Val]:
    """('c', c) when the decay is built from c_i - c_j of a (B, H, S) value; ('lg', lg) when it depends on no
    input and scales i - j by a per-head vector."""
    prod, decay = found["prod"], found["decay"]
    b, h, s = found["shape"]
    ops = _slice([decay], prod)
    for op in ops:
        if op.prim != "sub" or len(op.out.shape) != 4:
            continue
        a, c2 = (prod.get(id(x)) for x in op.ins)
        if a is None or c2 is None or a.prim != "broadcast_in_dim" or c2.prim != "broadcast_in_dim":
            continue
        if a.ins[0] is c2.ins[0] and tuple(a.params["broadcast_dimensions"]) == (0, 1, 2) \
                and tuple(c2.params["broadcast_dimensions"]) == (0, 1, 3) and a.ins[0].shape == (b, h, s):
            return "c", a.ins[0]
    if _reads_input([decay], prod):
        raise Unsupported("the decay reads the inputs but is not built from c_i - c_j of one (B, H, S) value")
    for op in ops:
        if op.prim != "mul":
            continue
        for x in op.ins:
            lg = _peel_bcast(x, prod)
            if lg.shape == (h,) and not lg.is_const:
                return "lg", lg
    raise Unsupported("the decay is not exp(c_i - c_j) of a (B, H, S) value nor a per-head rate times i - j")


def _check_decay(task: Task, traced: Traced, prog: Program, found: dict[str, Any], form: str, val: Val) -> None:
    """The reference's decay equals exp(c_i - c_j) below the diagonal (0 above) at the authoring size."""
    inputs = task.make_inputs(traced.scale, 1, "normal")
    dec, got = _evaluate(prog, [np.asarray(x) for x in inputs], [found["decay"], val])
    b, h, s = found["shape"]
    c = np.broadcast_to(got if form == "c" else got[:, None] * np.arange(s)[None, :], (b, h, s))
    tril = np.tril(np.ones((s, s), bool))
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.where(tril, np.exp(np.where(tril, c[..., :, None] - c[..., None, :], -np.inf)), 0.0)
    dec = np.broadcast_to(dec, want.shape)
    if not np.allclose(dec, want, rtol=1e-4, atol=1e-6):
        raise Unsupported("the decay does not equal exp(c_i - c_j) below the diagonal and 0 above it")


def propose(task: Task, traced: list[Traced], target: str) -> list[Proposal]:
    prog = from_jaxpr(traced[0].jaxpr)
    found = _find(prog)
    form, val = _decay_form(prog, found)
    small = min(traced, key=lambda t: sum(math.prod(x) for x in t.shapes))  # the reference runs here, on the CPU
    if small is traced[0]:
        _check_decay(task, small, prog, found, form, val)
    else:
        sprog = from_jaxpr(small.jaxpr)
        sfound = _find(sprog)
        _check_decay(task, small, sprog, sfound, *_decay_form(sprog, sfound))
    names = arg_names(task)
    if set(names) & _DEFINED:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & _DEFINED)}")
    probes = probes_for(task, traced)
    programs = [from_jaxpr(t.jaxpr) for t in probes.traces]
    if any([o.prim for o in p.ops] != [o.prim for o in prog.ops] for p in programs):
        raise Unsupported("the reference's structure changes with the inputs' sizes")
    idx = _in_order(prog, _slice([val], found["prod"]))
    taken = set(names) | {v.name for v in probes.vars} | _DEFINED
    lines, (cname,) = _render(programs, probes, names, idx, [prog.ops.index(found["prod"][id(val)])], taken)
    pre = _chain(found["pre"], found["s"], "s", found["rsum"].ins[0])
    post = _chain(found["post"], found["rsum"].out, "den", found["den"])
    b, h, s = found["shape"]
    (qi, qcast), (ki, kcast) = found["q"], found["k"]
    shapes = Shapes(b, h, s, traced[0].shapes[qi][3], traced[0].shapes[found["v"]][3],
                    np.dtype(prog.args[qi].dtype).itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    gpu = kernel_language(target) == "triton"
    # GPU: one strategy. The kernel's one_pass=True (the scores cast before the division, not after) was judged
    # incorrect on 15p's large-magnitude case, so it is not offered.
    kinds = [("", False)] if gpu else [("-stream", False), ("-resident", True)]
    what = ("Mamba-2 style decay exp(c_i - c_j), c computed from the inputs" if form == "c" else
            "RetNet style per-head decay gamma_h^(i-j)")
    plans = {
        "-stream": "every query block streams its key/value blocks twice along an 'arbitrary' grid axis (row sums "
                   "into a VMEM column, then the normalised value product into an f32 accumulator); blocks above "
                   "the diagonal are skipped and not fetched",
        "-resident": "the head's whole K and V stay in VMEM and each query block runs both passes (row sums, then "
                     "the normalised value product) as loops inside one grid step",
        "": "one program per query block loops twice over the key blocks at or below the diagonal (row sums, then "
            "the normalised value product), all in registers",
    }
    out = []
    for suffix, flag in kinds:
        src = _source(task, names, probes, lines, cname, form, pre, post, found, (qi, qcast), (ki, kcast), target,
                      tuning, config, flag, plans[suffix])
        out.append(Proposal(
            name=f"retention-{target}{suffix}", source=src,
            rationale=f"causal decayed retention ({b}x{h} heads, {s} positions, {what}) with its row normaliser: "
                      + plans[suffix] + "; the (S, S) scores and decay never go to HBM",
            template="retention"))
    return out


def _source(task: Task, names: list[str], probes: Any, lines: list[str], cname: str, form: str, pre: list[str],
            post: list[str], found: dict[str, Any], q: tuple[int, Any], k: tuple[int, Any], target: str,
            tuning: dict[str, list[Any]], config: dict[str, Any], flag: bool, plan: str) -> str:
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    fn = "retention_gpu" if gpu else "retention_tpu"
    qk = found["qk"]
    prec = qk.params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"

    def operand(i: int, cast: Any) -> str:
        src = np_dtype(task.args[i].dtype)
        # a lossless widening (bf16 -> f32) gives the same products as the kernel's f32-accumulated dot
        if cast is None or (jnp.issubdtype(cast, jnp.floating) and jnp.issubdtype(src, jnp.floating)
                            and np.dtype(cast).itemsize >= src.itemsize
                            and jnp.finfo(cast).nmant >= jnp.finfo(src).nmant):
            return names[i]
        return f"{names[i]}.astype({dtype_expr(cast)})"

    qx, kx, vx = operand(*q), operand(*k), names[found["v"]]
    b_, h_, s_ = (f"{names[q[0]]}.shape[{n}]" for n in range(3))
    if form == "c":
        decay = [f"    log_decay = jnp.broadcast_to({cname}, ({b_}, {h_}, {s_})).astype(jnp.float32)"]
    else:
        decay = [f"    lg = {cname}.astype(jnp.float32)  # the per-head log decay rate",
                 f"    log_decay = jnp.broadcast_to(lg[:, None] * jnp.arange({s_}, dtype=jnp.float32)[None, :], "
                 f"({b_}, {h_}, {s_}))"]
    used = probes.used(*lines)
    cfg_sig = ", ".join(f"{k_}={v!r}" for k_, v in config.items())
    cfg_call = ", ".join(f"{k_}={k_}" for k_ in config)
    mode = f"one_pass={flag}" if gpu else f"resident={flag}"
    text = ("out_i = sum_{j<=i} cast(s_ij / _post(sum_j _pre(s_ij))) v_j with s_ij = (q_i . k_j) exp(c_i - c_j): the "
            "reference's scores, decay mask, row normaliser and value product in one kernel. c, the cumulative log "
            "decay, is computed in plain JAX from the reference's own ops; _pre and _post are its ops before and "
            f"after the row sum. Strategy: {plan}. The kernel is mk/kernels/retention/{language_stem(target)}.py, copied below "
            "unchanged. Block sizes are requests, fitted to the sequence length.")
    src = [
        *file_head(f"mk offline author: decayed retention for {task.name} (target {target}).", text, gpu=gpu,
                   space=tuning),
        "",
        *family_section(module),
        "",
        "",
        "def _pre(s):",
        '    """The reference between the scores and the row sum (per block of scores)."""',
        *[f"    {line}" for line in pre],
        "",
        "",
        "def _post(den):",
        '    """The reference between the row sum and the divisor (per block of rows)."""',
        *[f"    {line}" for line in post],
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        *[f"    {v.name} = {v.source}" for v in used if v.name != v.source],
        *[f"    {line}" for line in lines],
        *decay,
        f"    return {fn}({qx}, {kx}, {vx}, log_decay, pre=_pre, post=_post, pv_dtype={dtype_expr(found['pv_dtype'])}, "
        f"out_dtype={dtype_expr(found['final'].out.dtype)}, precision={prec_expr}, {mode}, {cfg_call})",
        "",
    ]
    return "\n".join(src)
