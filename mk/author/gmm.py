"""Grouped-matmul recogniser: a batched matmul, or a megablox-style scan over groups, bound to :mod:`mk.kernels.gmm`.

Two forms of the reference are recognised from the jaxpr:

* a batched matrix product ``einsum("gmk,gkn->gmn")`` (one ``dot_general`` with
  one batch axis in front): G equal groups of Mg rows;
* a grouped matmul written as a ``scan`` over (weights, group sizes, group
  starts) whose body multiplies a ``dynamic_slice`` of the 2-D input by the
  group's weights, masks the rows past the group's size and adds the slab back
  with ``dynamic_update_slice``, the starts being the exclusive ``cumsum`` of
  the sizes. The kernel multiplies each group's rows exactly; this equals the
  scan wherever no slab start is clamped and no group is larger than its slab
  (what such a reference assumes of its inputs), and the judge checks it.

The written file carries ``mk/kernels/gmm/{tpu,gpu}.py`` verbatim and calls it.
"""

from __future__ import annotations

from typing import Any

from mk.author.emit import dtype_expr, family_section, file_head, language_stem, Unsupported
from mk.author.ir import stated_precision
from mk.author.probe import arg_names, signature, static_names
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.kernels.gmm import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec


def _prims(jaxpr: Any) -> list[str]:
    out = []
    for e in jaxpr.eqns:
        out.append(e.primitive.name)
        for p in e.params.values():
            inner = getattr(p, "jaxpr", p)
            if hasattr(inner, "eqns"):
                out += _prims(inner)
    return out


def _batched(jaxpr: Any) -> dict[str, Any]:
    """The batched-matmul form: operand indices, whether the weights are (G, N, K), the dot."""
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name != "dot_general":
        raise Unsupported("not a single batched matrix product")
    dot = jaxpr.eqns[0]
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    a, b = dot.invars
    if tuple(lb) != (0,) or tuple(rb) != (0,) or tuple(lc) != (2,) or tuple(rc) not in ((1,), (2,)):
        raise Unsupported("a product that is not (G, M, K) x (G, K, N) with the batch axis first")
    if len(a.aval.shape) != 3 or len(b.aval.shape) != 3 or a not in jaxpr.invars or b not in jaxpr.invars:
        raise Unsupported("the batched product's operands are not 3-D inputs")
    if jaxpr.outvars[0] is not dot.outvars[0]:
        raise Unsupported("work after the batched product")
    return {"x": jaxpr.invars.index(a), "w": jaxpr.invars.index(b), "w_t": tuple(rc) == (2,), "dot": dot}


def _scan(jaxpr: Any) -> dict[str, Any]:
    """The megablox-scan form: which inputs are lhs, rhs and group_sizes, and the body's dot."""
    scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    if len(scans) != 1:
        raise Unsupported("no single scan over groups")
    scan = scans[0]
    body = scan.params["jaxpr"].jaxpr
    prims = _prims(body)
    if prims.count("dot_general") != 1 or not {"dynamic_slice", "dynamic_update_slice", "select_n"} <= set(prims):
        raise Unsupported("the scan's body is not one masked product of a dynamic row slab added back in place")
    if "cumsum" not in _prims(jaxpr):
        raise Unsupported("no cumsum of group sizes before the scan")
    ins = list(jaxpr.invars)
    nc, ncar = scan.params["num_consts"], scan.params["num_carry"]
    consts, xs = scan.invars[:nc], scan.invars[nc + ncar:]
    lhs = [v for v in consts if v in ins and len(v.aval.shape) == 2]
    rhs = [v for v in xs if v in ins and len(v.aval.shape) == 3]
    sizes = [v for v in xs if v in ins and len(v.aval.shape) == 1 and "int" in str(v.aval.dtype)]
    if len(lhs) != 1 or len(rhs) != 1 or len(sizes) != 1 or ncar != 1:
        raise Unsupported("the scan does not run over (weights, group sizes) with the 2-D input as a constant")
    out = jaxpr.outvars[0]
    last = next((e for e in jaxpr.eqns if out in e.outvars), None)
    m = lhs[0].aval.shape[0]
    if last is None or last.primitive.name != "slice" or last.invars[0] is not scan.outvars[0] \
            or tuple(last.params["start_indices"]) != (0, 0) or last.params["limit_indices"][0] != m:
        raise Unsupported("the output is not the scan's accumulator cut to the input's rows")
    dot = next(e for e in body.eqns if e.primitive.name == "dot_general")
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    if lb or rb or tuple(lc) != (1,) or tuple(rc) != (0,):
        raise Unsupported("the group product is not (rows, K) x (K, N)")
    return {"x": ins.index(lhs[0]), "w": ins.index(rhs[0]), "sizes": ins.index(sizes[0]), "dot": dot}


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    jaxpr = traced[0].jaxpr.jaxpr
    if len(jaxpr.outvars) != 1:
        raise Unsupported("the gmm template writes one output")
    try:
        form, found = "batched", _batched(jaxpr)
    except Unsupported as first:
        try:
            form, found = "scan", _scan(jaxpr)
        except Unsupported as second:
            raise Unsupported(f"{first}; {second}") from None
    names = arg_names(task)
    defined = {"gmm_tpu", "gmm_gpu", "gmm_visits", "gmm_tiles", "_gmm_tpu_kernel", "_gmm_gpu_kernel", "_block",
               "_fit", "_pow2"}
    if set(names) & defined:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & defined)}")
    shapes0 = traced[0].shapes
    x_shape, w_shape = shapes0[found["x"]], shapes0[found["w"]]
    if form == "batched":
        g, mg, k = x_shape
        n = w_shape[1] if found["w_t"] else w_shape[2]
        shapes = Shapes(g * mg, k, n, g, np_dtype(task.args[found["x"]].dtype).itemsize)
    else:
        shapes = Shapes(x_shape[0], x_shape[1], w_shape[2], w_shape[0], np_dtype(task.args[found["x"]].dtype).itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    src = _render(task, names, form, found, target, tuning, config, dtype_expr(jaxpr.outvars[0].aval.dtype))
    what = ("a batched matmul as G equal groups" if form == "batched" else
            "a scan over groups (dynamic row slabs, masked, added back) as one grouped matmul")
    return Proposal(
        name=f"gmm-{target}",
        source=src,
        rationale=f"{what} ({shapes.groups} groups, {shapes.m}x{shapes.k} by {shapes.k}x{shapes.n}): "
        + ("row tiles walked group by group with the group bounds in scalar prefetch" if kernel_language(target) == "mosaic" else
           "one program per tile looping over the groups it holds"),
        template="gmm",
    )


def _render(task: Task, names: list[str], form: str, found: dict[str, Any], target: str,
            tuning: dict[str, list[Any]], config: dict[str, Any], out_dtype: str) -> str:
    gpu = kernel_language(target) == "triton"
    module = gpu_kernel if gpu else tpu_kernel
    fn = "gmm_gpu" if gpu else "gmm_tpu"
    dot = found["dot"]
    prec_expr = stated_precision(dot)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    x, w = names[found["x"]], names[found["w"]]
    if form == "batched":
        body = [
            f"    g, mg, k = {x}.shape",
            f"    w = jnp.swapaxes({w}, 1, 2)  # (G, K, N)" if found["w_t"] else f"    w = {w}",
            "    sizes = jnp.full((g,), mg, jnp.int32)  # G equal groups of Mg rows",
            f"    out = {fn}({x}.reshape(g * mg, k), w, sizes, out_dtype={out_dtype}, precision={prec_expr}, {cfg_call})",
            "    return out.reshape(g, mg, w.shape[2])",
        ]
        text = (f"out[g] = {x}[g] @ {w}[g] for every g: a batched matmul as a grouped matmul of G equal groups.")
    else:
        statics = static_names(task)
        body = ([f"    del {', '.join(statics)}  # the kernel masks each group's rows exactly: no slab size needed"]
                if statics else [])
        body.append(f"    return {fn}({x}, {w}, {names[found['sizes']]}, out_dtype={out_dtype}, precision={prec_expr}, "
                    f"{cfg_call})")
        text = (f"out[rows of group g] = {x}[rows of group g] @ {w}[g], the groups consecutive from row 0 with sizes "
                f"{names[found['sizes']]}: the reference's scan over groups as one grouped matmul (equal to it where no "
                "slab start is clamped and no group is larger than its slab).")
    text += (f" The kernel is mk/kernels/gmm/{language_stem(target)}.py, copied below unchanged. Block sizes are requests, fitted to "
             "the sizes the kernel is called with.")
    lines = [
        *file_head(f"mk offline author: grouped matmul for {task.name} (target {target}).", text, gpu=gpu, space=tuning),
        "",
        *family_section(module),
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        *body,
        "",
    ]
    return "\n".join(lines)
