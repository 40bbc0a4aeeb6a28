"""Mixture-of-experts recogniser: a top-k routed gated MLP written densely over all experts, computed sparsely with
the grouped-matmul kernels of :mod:`mk.kernels.gmm`.

Recognised from the flattened reference (this module's :func:`flatten`: :mod:`mk.author.ir` plus ``top_k``'s two
outputs), walking back from its one output:

* ``out = dot(y, w)`` contracting the expert axis, batched over the token axes: ``w`` (tokens..., N) the combine
  weights, computed from the inputs through a ``top_k`` (the router: logits, top-k, softmax, one-hot);
* ``y`` (through transposes) the down product of an input ``wd`` (experts batched) and the hidden ``h``;
* ``h = act(x @ wg, x @ wu)`` elementwise, ``x`` (tokens..., E) and ``wg``/``wu`` (experts, E, M) inputs.

The dense reference multiplies every token by every expert and weights the unselected ones by exactly 0. That is
checked at the authoring size (``w`` is zero outside ``top_k``'s indices); the kernel then sorts the token
choices by expert in plain JAX (``argsort``; group sizes by ``bincount``), runs the gate and up products, ``act``
(the reference's own ops) and the down product fused in one grouped kernel over the sorted rows
(:mod:`mk.kernels.gmm.mlp_tpu` / ``mlp_gpu``: one kernel, so the judge's ablation sees it change the result), and
combines each token's k rows with their weights. The router is the reference's own ops in plain JAX.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mk.author.emit import _INLINE, dtype_expr, family_section, file_head, language_stem, Unsupported
from mk.author.ir import ELEMENTWISE, Op, Program, Val, _bind_consts, _read
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.retention import _evaluate, _in_order, _render, _slice
from mk.author.trace import Traced
from mk.kernels.gmm import gpu as gpu_kernel, masked_gpu, masked_tpu, mlp_gpu, mlp_tpu, tpu as tpu_kernel
from mk.kernels.swiglu import Shapes, default, space
from mk.task import Task
from mk.targets import kernel_language, kernel_spec

_DEFINED = {"gmm_tpu", "gmm_gpu", "gmm_visits", "gmm_tiles", "_gmm_tpu_kernel", "_gmm_gpu_kernel", "_block", "_fit",
            "_pow2", "_act", "_moe", "combine", "choice", "gmlp_tpu", "gmlp_gpu", "_gmlp_tpu_kernel", "_gmlp_gpu_kernel",
            "_gmlp_fit", "_silu_gate", "_silu_gate_f32", "masked_mlp_tpu", "masked_mlp_gpu", "_masked_tpu_kernel",
            "_masked_gpu_kernel", "_silu_gate_m", "_silu_gate_mf32", "_moe_masked"}

_HELPER = '''def _moe(x, combine, choice, wg, wu, wd, *, act, inter_dtype, down_dtype, out_dtype, precision, **config):
    """sum over each token's k choices of combine[t, n] * act(x_t @ wg[n], x_t @ wu[n]) @ wd[n], n the choice: the
    choices sorted by expert, the three products fused in one grouped kernel. x (tokens..., E); combine (tokens...,
    N); choice (tokens..., k); wg/wu (N, E, M); wd (N, M, E')."""
    lead, e = x.shape[:-1], x.shape[-1]
    n, k = wg.shape[0], choice.shape[-1]
    xt = x.reshape(-1, e)
    t = xt.shape[0]
    experts = choice.reshape(-1).astype(jnp.int32)  # (T*k,): token t's j-th choice at t*k + j
    order = jnp.argsort(experts, stable=True)  # the choices grouped by expert
    sizes = jnp.bincount(experts, length=n).astype(jnp.int32)
    y = {fn}(xt[order // k], wg, wu, wd, sizes, activation=act, inter_dtype=inter_dtype, out_dtype=down_dtype,
             precision=precision, **config)
    y = jnp.zeros_like(y).at[order].set(y).reshape(t, k, -1)  # back to (token, choice) order
    w = jnp.take_along_axis(combine.reshape(t, n), choice.reshape(t, k).astype(jnp.int32), axis=1)
    dt = jnp.result_type(y.dtype, w.dtype)
    out = jnp.sum(y.astype(dt) * w.astype(dt)[..., None], axis=1)
    return out.reshape(*lead, -1).astype(out_dtype)
'''

_MASKED = '''def _moe_masked(x, combine, wg, wu, wd, *, act, inter_dtype, down_dtype, out_dtype, precision, **config):
    """sum_n combine[t, n] * act(x_t @ wg[n], x_t @ wu[n]) @ wd[n] in one kernel that skips the (token tile, expert)
    pairs no token of the tile chose. x (tokens..., E); combine (tokens..., N); wg/wu (N, E, M); wd (N, M, E')."""
    lead, e = x.shape[:-1], x.shape[-1]
    n = wg.shape[0]
    dt = jnp.result_type(down_dtype, combine.dtype)
    out = {fn}(x.reshape(-1, e), wg, wu, wd, combine.reshape(-1, n).astype(dt), activation=act,
             inter_dtype=inter_dtype, down_dtype=down_dtype, out_dtype=dt, precision=precision, **config)
    return out.reshape(*lead, -1).astype(out_dtype)
'''


def flatten(closed: Any) -> Program:
    """:func:`mk.author.ir.from_jaxpr` that also reads ``top_k``: its values and indices as two ops
    (``top_k``, ``top_k_idx``)."""
    jaxpr = closed.jaxpr
    env: dict[Any, Val] = {}
    args = []
    for i, v in enumerate(jaxpr.invars):
        env[v] = Val(tuple(v.aval.shape), np.dtype(v.aval.dtype), arg=i)
        args.append(env[v])
    _bind_consts(jaxpr.constvars, closed.consts, env)
    ops: list[Op] = []
    _walk(jaxpr, env, ops)
    return Program(args, ops, [_read(env, v) for v in jaxpr.outvars])


def _walk(jaxpr: Any, env: dict[Any, Val], ops: list[Op]) -> None:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [_read(env, a) for a in eqn.invars]
        if name in _INLINE:
            p = eqn.params
            sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
            if sub is None:
                raise Unsupported(f"cannot inline {name!r}")
            inner = getattr(sub, "jaxpr", sub)
            _bind_consts(inner.constvars, getattr(sub, "consts", ()), env)
            for v, val in zip(inner.invars, ins):
                env[v] = val
            _walk(inner, env, ops)
            for outer, v in zip(eqn.outvars, inner.outvars):
                env[outer] = _read(env, v)
            continue
        outs = [Val(tuple(o.aval.shape), np.dtype(o.aval.dtype)) for o in eqn.outvars]
        if name == "top_k":
            for prim, o, var in zip(("top_k", "top_k_idx"), outs, eqn.outvars):
                ops.append(Op(prim, ins, dict(eqn.params), o, None))
                env[var] = o
            continue
        if len(outs) != 1:
            raise Unsupported(f"primitive {name!r} with several outputs")
        params = dict(eqn.params)
        if name in ("squeeze", "expand_dims"):
            name, params = "reshape", {"new_sizes": outs[0].shape, "dimensions": None}
        ops.append(Op(name, ins, params, outs[0], eqn.primitive))
        env[eqn.outvars[0]] = outs[0]


def _find(prog: Program) -> dict[str, Any]:
    prod = prog.producers()
    if len(prog.outs) != 1 or not any(o.prim == "top_k" for o in prog.ops):
        raise Unsupported("no top_k routing to one output")
    final = prod.get(id(prog.outs[0]))
    if final is None or final.prim != "dot_general":
        raise Unsupported("the output is not a product of expert outputs and combine weights")
    (flc, frc), (flb, frb) = final.params["dimension_numbers"]
    yv, wv = final.ins
    nt = len(flb)
    if len(yv.shape) != nt + 2 or len(wv.shape) != nt + 1 or tuple(flb) != tuple(range(nt)) \
            or tuple(frb) != tuple(range(nt)) or tuple(frc) != (nt,) or len(flc) != 1:
        raise Unsupported("the combine is not sum_n y[tokens, n, :] * w[tokens, n] batched over the token axes")
    if not any(o.prim == "top_k_idx" for o in _slice([wv], prod)):
        raise Unsupported("the combine weights do not come from a top_k")
    # y through transposes back to the down product
    perm = list(range(len(yv.shape)))
    v = yv
    while id(v) in prod and prod[id(v)].prim == "transpose":
        p = prod[id(v)].params["permutation"]
        perm = [p[a] for a in perm]
        v = prod[id(v)].ins[0]
    down = prod.get(id(v))
    if down is None or down.prim != "dot_general":
        raise Unsupported("the expert outputs are not a product")
    (dlc, drc), (dlb, drb) = down.params["dimension_numbers"]
    wi = next((j for j, x in enumerate(down.ins) if x.arg is not None and len(x.shape) == 3), None)
    if wi is None or len(dlc) != 1 or len(dlb) != 1:
        raise Unsupported("the down product is not (experts batched) of a 3-D weight input and the hidden values")
    wd, hv = down.ins[wi], down.ins[1 - wi]
    (wc, hc), (wb, hb) = ((dlc[0], drc[0]), (dlb[0], drb[0])) if wi == 0 else ((drc[0], dlc[0]), (drb[0], dlb[0]))
    # hidden = act(x @ wg, x @ wu), elementwise, same shape
    mid = _slice([hv], prod)
    ups = [o for o in mid if o.prim == "dot_general"]
    if len(ups) != 2 or any(o.prim != "dot_general" and o.prim not in ELEMENTWISE for o in mid):
        raise Unsupported("the hidden values are not an elementwise function of two products")
    gate, up = sorted(ups, key=lambda o: prog.ops.index(o))
    x = gate.ins[0]
    for o in (gate, up):
        (lc, rc), (lb, rb) = o.params["dimension_numbers"]
        if o.ins[0] is not x or x.arg is None or o.ins[1].arg is None or lb or rb \
                or tuple(lc) != (len(x.shape) - 1,) or len(o.ins[1].shape) != 3 or o.out.shape != hv.shape:
            raise Unsupported("the up products are not x @ w over x's last axis with 3-D expert weights")
    if len(x.shape) - 1 != nt or not nt <= hb < nt + 2 or not nt <= hc < nt + 2 or hb == hc:
        raise Unsupported("the down product does not batch the experts and contract the hidden axis")
    rc_g = gate.params["dimension_numbers"][0][1][0]
    free_g = [a for a in range(3) if a != rc_g]
    g_expert, g_hidden = free_g[hb - nt], free_g[hc - nt]
    if up.params["dimension_numbers"] != gate.params["dimension_numbers"]:
        raise Unsupported("the gate and up products differ in layout")
    # labels of the down product's output axes, then of y: tokens 0..nt-1, 'n', 'e'
    wfree = [a for a in range(3) if a not in (wc, wb)][0]
    hfree = [a for a in range(len(hv.shape)) if a not in (hb, hc)]
    if hfree != list(range(nt)):
        raise Unsupported("the hidden values' token axes are not in front")
    first, second = (["e"], list(range(nt))) if wi == 0 else (list(range(nt)), ["e"])
    labels = ["n"] + first + second
    ylab = [labels[a] for a in perm]
    if ylab[:nt] != list(range(nt)) or ylab[flc[0]] != "n" or [a for a in ylab[nt:] if a != "n"] != ["e"]:
        raise Unsupported("the combine does not contract the expert axis of the expert outputs")
    mid_ops = [o for o in mid if o.prim != "dot_general"]
    return {"prod": prod, "final": final, "w": wv, "x": x.arg, "wg": gate.ins[1].arg, "wu": up.ins[1].arg,
            "wd": wd.arg, "g_perm": (g_expert, rc_g, g_hidden), "d_perm": (wb, wc, wfree), "gate": gate, "up": up,
            "down": down, "h": hv, "mid": mid_ops,
            "idx": next(o.out for o in prog.ops if o.prim == "top_k_idx")}


def _check_sparse(task: Task, traced: Traced, prog: Program, found: dict[str, Any]) -> None:
    """The combine weights are zero outside each token's top_k indices (the dense experts there are weighted 0)."""
    inputs = [np.asarray(a) for a in task.make_inputs(traced.scale, 1, "normal")]
    w, idx = _evaluate(prog, inputs, [found["w"], found["idx"]])
    n = w.shape[-1]
    w, idx = w.reshape(-1, n), idx.reshape(w.reshape(-1, n).shape[0], -1).astype(int)
    if idx.shape[0] != w.shape[0] or idx.min() < 0 or idx.max() >= n:
        raise Unsupported("the top_k indices do not index the combine weights' expert axis")
    chosen = np.zeros_like(w, bool)
    np.put_along_axis(chosen, idx, True, axis=1)
    if np.any(w[~chosen] != 0):
        raise Unsupported("the combine weights are not zero outside the top_k choices (the routing is not sparse)")


def propose(task: Task, traced: list[Traced], target: str) -> list[Proposal]:
    prog = flatten(traced[0].jaxpr)
    found = _find(prog)
    names = arg_names(task)
    if set(names) & _DEFINED:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & _DEFINED)}")
    small = min(traced, key=lambda t: sum(math.prod(x) for x in t.shapes))  # the reference runs here, on the CPU
    sprog = prog if small is traced[0] else flatten(small.jaxpr)
    _check_sparse(task, small, sprog, found if sprog is prog else _find(sprog))
    probes = probes_for(task, traced)
    programs = [flatten(t.jaxpr) for t in probes.traces]
    if any([o.prim for o in p.ops] != [o.prim for o in prog.ops] for p in programs):
        raise Unsupported("the reference's structure changes with the inputs' sizes or static values")
    taken = set(names) | {v.name for v in probes.vars} | _DEFINED
    prod = found["prod"]
    w_op = prod.get(id(found["w"]))
    idx_op = next(o for o in prog.ops if o.prim == "top_k_idx")
    route = _in_order(prog, _slice([found["w"], found["idx"]], prod))
    lines, (wname, iname) = _render(programs, probes, names, route,
                                    [prog.ops.index(w_op), prog.ops.index(idx_op)], taken)
    p0 = programs[0]  # _render names values of the first probe program
    seed = {id(p0.ops[prog.ops.index(found["gate"])].out): "g", id(p0.ops[prog.ops.index(found["up"])].out): "u"}
    act_lines, (hname,) = _render(programs, probes, names, _in_order(prog, found["mid"]),
                                  [prog.ops.index(prod[id(found["h"])])], taken | {"g", "u"}, seed=seed, prefix="a")
    if probes.used(*act_lines):
        raise Unsupported("the gate depends on the inputs' sizes or static values")
    if kernel_language(target) == "triton":
        # Triton lowers no 16-bit division, so the GPU kernel runs the gate in f32: each op's result is rounded to
        # the reference's dtype for it, so large values round as the reference's 16-bit ops do
        mid = [p0.ops[k_] for k_ in _in_order(prog, found["mid"])]
        act_lines = [_rounded(line, op.out.dtype) for line, op in zip(act_lines, mid)]
    shapes0 = traced[0].shapes
    x_shape, wg_shape = shapes0[found["x"]], shapes0[found["wg"]]
    tokens = int(np.prod(x_shape[:-1]))
    k = found["idx"].shape[-1]
    ge, _, gh = found["g_perm"]
    wd_shape = shapes0[found["wd"]]
    shapes = Shapes(tokens * k, x_shape[-1], wg_shape[gh], wd_shape[found["d_perm"][2]],
                    prog.args[found["x"]].dtype.itemsize)  # the fused MLP's tiling (swiglu's fields)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    src = _source(task, names, probes, lines, wname, iname, act_lines, hname, found, target, tuning, config, False)
    masked = _source(task, names, probes, lines, wname, iname, act_lines, hname, found, target, tuning, config, True)
    return [Proposal(
        name=f"moe-{target}",
        source=src,
        rationale=f"top-{k} of {wg_shape[ge]} experts computed sparsely ({tokens} tokens x {k} choices instead of "
        f"x {wg_shape[ge]}): the choices sorted by expert, gate/up products, the reference's gate and the down product "
        "fused in one grouped kernel (mk/kernels/gmm/mlp) over the sorted rows, each token's rows combined with its "
        "routing weights",
        template="moe",
    ), Proposal(
        name=f"moe-{target}-masked",
        source=masked,
        rationale=f"top-{k} of {wg_shape[ge]} experts without sorting: one kernel over (token tile, expert, hidden "
        "block) that skips the pairs no token of the tile chose (a scalar-prefetched mask on TPU, lax.cond on GPU), "
        "the gate, the down product and the weighted combine fused; no gather or sort, dense over the experts a "
        "tile touches (suits few tokens per tile or skewed routing)",
        template="moe",
    )]


def _rounded(line: str, dtype: Any) -> str:
    """``v = expr`` with expr rounded to ``dtype`` and held in f32, when ``dtype`` is a 16-bit float."""
    if np.dtype(dtype).itemsize != 2 or dtype_expr(dtype) not in ("jnp.bfloat16", "jnp.float16"):
        return line
    name, expr = line.split(" = ", 1)
    return f"{name} = jnp.asarray({expr}).astype({dtype_expr(dtype)}).astype(jnp.float32)"


def _source(task: Task, names: list[str], probes: Any, lines: list[str], wname: str, iname: str,
            act_lines: list[str], hname: str, found: dict[str, Any], target: str, tuning: dict[str, list[Any]],
            config: dict[str, Any], masked: bool) -> str:
    gpu = kernel_language(target) == "triton"
    fn = ("masked_mlp_gpu" if gpu else "masked_mlp_tpu") if masked else ("gmlp_gpu" if gpu else "gmlp_tpu")

    def moved(i: int, perm: tuple[int, int, int]) -> str:
        return names[i] if perm == (0, 1, 2) else f"jnp.transpose({names[i]}, {perm!r})"

    prec = found["gate"].params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    cfg_sig = ", ".join(f"{k_}={v!r}" for k_, v in config.items())
    cfg_call = ", ".join(f"{k_}={k_}" for k_ in config)
    used = probes.used(*lines)
    text = ("The reference computes every expert for every token and weights the unselected ones by 0; this kernel "
            "runs one fused kernel over (token tile, expert, hidden block) that skips the pairs no token of the tile "
            "chose (mk/kernels/gmm/masked_" + language_stem(target) + ".py, copied below unchanged, after the helpers of "
            f"mk/kernels/gmm/{language_stem(target)}.py): the gate and up products, the reference's gate (_act), the down product and "
            "the weighted combine; the router (the reference's own ops, plain JAX) gives the combine weights. No sort "
            "or gather.") if masked else (
            "The reference computes every expert for every token and weights the unselected ones by 0; this kernel "
            "computes only each token's top-k choices: the router (the reference's own ops, plain JAX) gives the "
            "combine weights and the choices, the choices are sorted by expert (argsort, bincount for the group "
            "sizes), the gate and up products, the reference's gate (_act) and the down product run fused in one "
            f"grouped kernel over the sorted rows (mk/kernels/gmm/mlp_{language_stem(target)}.py with the visit tables of "
            f"mk/kernels/gmm/{language_stem(target)}.py, both copied below unchanged), and each token's rows are combined with their "
            "weights.")
    src = [
        *file_head(f"mk offline author: sparse mixture of experts for {task.name} (target {target}).", text, gpu=gpu,
                   space=tuning),
        "",
        *family_section(gpu_kernel if gpu else tpu_kernel),
        "",
        "",
        *(family_section(masked_gpu if gpu else masked_tpu) if masked else
          family_section(mlp_gpu if gpu else mlp_tpu)),
        "",
        "",
        (_MASKED if masked else _HELPER).replace("{fn}", fn).rstrip("\n"),
        "",
        "",
        "def _act(g, u):",
        '    """The reference between the up products and the down product (elementwise)."""',
        *[f"    {line}" for line in act_lines],
        f"    return {hname}",
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        *[f"    {v.name} = {v.source}" for v in used if v.name != v.source],
        *[f"    {line}" for line in lines],
        f"    combine, choice = {wname}, {iname}  # the routing: weights (tokens..., N), top-k experts (tokens..., k)",
        (f"    return _moe_masked({names[found['x']]}, combine, " if masked else
         f"    return _moe({names[found['x']]}, combine, choice, ") + f"{moved(found['wg'], found['g_perm'])}, "
        f"{moved(found['wu'], found['g_perm'])}, {moved(found['wd'], found['d_perm'])}, act=_act, "
        f"inter_dtype={dtype_expr(found['gate'].out.dtype)}, down_dtype={dtype_expr(found['down'].out.dtype)}, "
        f"out_dtype={dtype_expr(found['final'].out.dtype)}, precision={prec_expr}, {cfg_call})",
        "",
    ]
    return "\n".join(src)
