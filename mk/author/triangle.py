"""Triangle-update recogniser (AlphaFold's triangle multiplicative update): a computation around one batched
matrix product, every product bound to :mod:`mk.kernels.gmm`, everything else in plain JAX.

Applies when the reference (flattened by :mod:`mk.author.ir`) holds exactly one ``dot_general`` with batch
axes, one contracting axis and 3-D operands that are computed (not inputs: a lone batched product of inputs is
:mod:`mk.author.gmm`'s), fed by other matrix products: the triangle update's ``einsum('ikc,jkc->ijc')``, a
product per channel between gated projections and a normalised output projection.

Every product runs in the grouped-matmul kernel: each ``x @ w`` (the gated input projections, the output
projection and the output gate) as one group, and the batched product as one group of M rows per batch (its
operands transposed to (batch, M, K) and (batch, K, N) in XLA). At the task's full size the batched product is
two thirds of the FLOPs, so it cannot stay in XLA (the judge's rule 15); the kernels feeding other kernels are a
pipeline, which the judge's ablation follows (``program.kernel_feeds``). The norms and gates are the reference's
own ops, written as whole-array JAX with sizes read from the arguments.
"""

from __future__ import annotations

import re
from typing import Any

from mk.author.emit import Unsupported, dtype_expr, family_section, file_head
from mk.author.ir import from_jaxpr, render
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.kernels.gmm import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task
from mk.targets import kernel_language, kernel_spec

_DEFINED = {"gmm_tpu", "gmm_gpu", "gmm_visits", "gmm_tiles", "_gmm_tpu_kernel", "_gmm_gpu_kernel", "_block", "_fit",
            "_pow2", "_matmul", "_bmm"}
_LINE = re.compile(r"^(\w+) = lax\.dot_general\((\w+), (\w+), ")

_HELPER = '''def _matmul(a, w, *, out_dtype, precision, **config):
    """a @ w over a's last axis (w 2-D) as a grouped matmul of one group."""
    lead, k = a.shape[:-1], a.shape[-1]
    rows = a.reshape(-1, k)
    out = {fn}(rows, w[None], jnp.full((1,), rows.shape[0], jnp.int32), out_dtype=out_dtype, precision=precision,
              **config)
    return out.reshape(*lead, w.shape[1])


def _bmm(a, b, dimension_numbers, *, out_dtype, precision, **config):
    """lax.dot_general of 3-D a and b with one batch and one contracting axis (output: batch, a's free axis, b's),
    as a grouped matmul with one group of M rows per batch."""
    ((ca,), (cb,)), ((ba,), (bb,)) = dimension_numbers
    fa = next(d for d in range(3) if d not in (ca, ba))
    fb = next(d for d in range(3) if d not in (cb, bb))
    a = jnp.transpose(a, (ba, fa, ca))  # (G, M, K)
    b = jnp.transpose(b, (bb, cb, fb))  # (G, K, N)
    g, m, k = a.shape
    config = {**config, "block_m": min(config["block_m"], m)}  # row tiles within one batch: no tile is visited twice
    out = {fn}(a.reshape(g * m, k), b, jnp.full((g,), m, jnp.int32), out_dtype=out_dtype, precision=precision,
              **config)
    return out.reshape(g, m, b.shape[2])
'''


def _upstream(op: Any, prod: dict[int, Any]) -> list[Any]:
    seen: dict[int, Any] = {}
    todo = list(op.ins)
    while todo:
        v = todo.pop()
        o = prod.get(id(v))
        if o is not None and id(o) not in seen:
            seen[id(o)] = o
            todo.extend(o.ins)
    return list(seen.values())


def _precision(op: Any) -> str:
    """The ``precision=`` expression of one product as the reference states it."""
    prec = op.params.get("precision")
    if prec is None or not any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        return "None"
    first = prec[0] if isinstance(prec, tuple) else prec
    return f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    prog = from_jaxpr(traced[0].jaxpr)
    dots = [k for k, o in enumerate(prog.ops) if o.prim == "dot_general"]
    batched = [k for k in dots if prog.ops[k].params["dimension_numbers"][1][0]]
    if len(batched) != 1 or len(dots) < 2:
        raise Unsupported("not one batched matrix product among other products")
    op = prog.ops[batched[0]]
    (lc, rc), (lb, rb) = op.params["dimension_numbers"]
    if len(lc) != 1 or len(lb) != 1 or any(len(v.shape) != 3 for v in op.ins):
        raise Unsupported("the batched product is not 3-D with one batch and one contracting axis")
    if any(v.arg is not None for v in op.ins):
        raise Unsupported("the batched product reads an input directly (the gmm template's case)")
    names = arg_names(task)
    if set(names) & _DEFINED:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & _DEFINED)}")
    probes = probes_for(task, traced)
    programs = [from_jaxpr(t.jaxpr) for t in probes.traces]
    lines, outs = render(programs, probes, names)
    if len(lines) != len(prog.ops):
        raise Unsupported("the rendered program does not have one line per op")
    a_shape, b_shape = op.ins[0].shape, op.ins[1].shape
    g, k = a_shape[lb[0]], a_shape[lc[0]]
    m = [a_shape[d] for d in range(3) if d not in (lc[0], lb[0])][0]
    n = [b_shape[d] for d in range(3) if d not in (rc[0], rb[0])][0]
    gpu = kernel_language(target) == "triton"
    fn = "gmm_gpu" if gpu else "gmm_tpu"
    prod = prog.producers()
    first = [k_ for k_ in dots if not any(o.prim == "dot_general" for o in _upstream(prog.ops[k_], prod))]
    if batched[0] in first:
        raise Unsupported("the batched product is not fed by other products")
    if not first:
        raise Unsupported("no product that other products do not feed")
    proj = prog.ops[first[0]]
    rows = 1
    for d in proj.ins[0].shape[:-1]:
        rows *= d
    shapes = Shapes(rows, proj.ins[0].shape[-1], proj.ins[1].shape[-1], 1, proj.ins[0].dtype.itemsize)
    tuning = space(target, shapes)
    config = default(kernel_spec(target), shapes).kwargs(target)
    cfg_call = ", ".join(f"{k_}={k_}" for k_ in config)
    # Every product is a kernel: the x @ w products as one group each, the batched product as one group per batch.
    for k_ in dots:
        o = prog.ops[k_]
        hit = _LINE.match(lines[k_])
        if hit is None:
            raise Unsupported("a product did not render as one dot_general")
        opet = o.params.get("preferred_element_type")
        common = (f"out_dtype={dtype_expr(opet if opet is not None else o.out.dtype)}, precision={_precision(o)}, "
                  f"{cfg_call})  # the kernel")
        if k_ == batched[0]:
            dims = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
            lines[k_] = f"{hit.group(1)} = _bmm({hit.group(2)}, {hit.group(3)}, {dims}, {common}"
            continue
        (plc, prc), (plb, prb) = o.params["dimension_numbers"]
        if plb or prb or len(o.ins[1].shape) != 2 or tuple(plc) != (len(o.ins[0].shape) - 1,) or tuple(prc) != (0,):
            raise Unsupported("a product other than the batched one is not x @ w over x's last axis")
        lines[k_] = f"{hit.group(1)} = _matmul({hit.group(2)}, {hit.group(3)}, {common}"
    used = probes.used(*lines, *outs)
    ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
    text = (f"Every product of the reference runs in the grouped-matmul kernel (mk/kernels/gmm, copied below "
            f"unchanged): the {len(dots) - 1} x @ w products (the gated input projections, the output projection and "
            f"gate) as one group each, and the batched product ({g} batches of {m}x{k} by {k}x{n}, the per-channel "
            "einsum) as one group of rows per batch, its operands transposed in XLA. The rest of the reference "
            "(norms, gates) is its own ops in plain JAX, sizes read from the arguments.")
    src = [
        *file_head(f"mk offline author: batched matmul kernel inside {task.name} (target {target}).", text, gpu=gpu,
                   space=tuning),
        "",
        *family_section(gpu_kernel if gpu else tpu_kernel),
        "",
        "",
        _HELPER.replace("{fn}", fn).rstrip("\n"),
        "",
        "",
        f"def kernel({signature(task, ', '.join(f'{k_}={v!r}' for k_, v in config.items()))}):",
        *[f"    {v.name} = {v.source}" for v in used if v.name != v.source],
        *[f"    {line}" for line in lines],
        f"    return {ret}",
        "",
    ]
    return Proposal(
        name=f"triangle-{target}",
        source="\n".join(src),
        rationale=f"every product as a Pallas grouped matmul (mk/kernels/gmm): the {len(dots) - 1} projections (x @ w, "
        f"e.g. {rows}x{shapes.k} by {shapes.k}x{shapes.n}) as one group each, the batched product ({g} x {m}x{k} @ "
        f"{k}x{n}) as one group per batch; norms and gates in plain JAX",
        template="triangle",
    )
