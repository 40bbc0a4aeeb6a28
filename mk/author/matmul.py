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

import math
from dataclasses import dataclass
from typing import Any

from mk.author.emit import Emitter, Unsupported, dtype_expr
from mk.author.proposal import Proposal
from mk.author.trace import Traced, symbolic_literals
from mk.task import Task


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


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    t0 = traced[0]
    jaxpr = t0.jaxpr.jaxpr
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    if len(dots) != 1:
        raise Unsupported(f"the matmul template needs exactly one top-level matrix product, found {len(dots)}")
    dot = dots[0]
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
    M, N = dot.outvars[0].aval.shape
    params = [i for i in range(len(invars)) if i not in (lhs.index, rhs.index)]
    param_kinds = []
    for i in params:
        shape = tuple(invars[i].aval.shape)
        if shape == (M, N):
            param_kinds.append("tile")
        elif shape in ((N,), (1, N)):
            param_kinds.append("col")
        elif shape in ((M,), (M, 1)):
            param_kinds.append("row")
        elif math.prod(shape) == 1:
            param_kinds.append("scalar")
        else:
            raise Unsupported(f"an epilogue input of shape {shape} does not tile with the ({M}, {N}) output")
    symbolic = symbolic_literals(traced, trailing_from=1)
    if any(f"a{lhs.index}." in s or f"a{rhs.index}." in s for s in symbolic.values()):
        raise Unsupported("a constant depends on the matmul operands' shapes")
    em = Emitter(1, symbolic)
    em.bind(dot.outvars[0], "acc", True)
    for i, kind in zip(params, param_kinds):
        em.bind(invars[i], f"a{i}", kind in ("tile", "row"))
    em.emit(epilogue)
    body = em.result(jaxpr.outvars)
    if len(jaxpr.outvars) != 1:
        raise Unsupported("the matmul template writes one output")
    out_shape = tuple(jaxpr.outvars[0].aval.shape)
    if out_shape[:1] != (M,):
        raise Unsupported("the output is not row-aligned with the product")
    reduces = any(p.startswith("reduce_") or p.startswith("arg") for p in body.primitives)
    full_n = reduces or bool(symbolic) or out_shape != (M, N)
    space = _space(target, M, N, dot.invars[0].aval.shape[1], full_n)
    src = _render(task, body, target, lhs, rhs, w_t, params, param_kinds, dot, space, full_n)
    return Proposal(
        name=f"matmul-epilogue-{target}",
        source=src,
        rationale=f"tiled matmul ({M}x{N}, K={a.aval.shape[1]}) with the epilogue fused "
        f"({', '.join(sorted(body.primitives)) or 'none'}); the product never goes back to HBM before the epilogue",
        template="matmul",
    )


def _divisors(n: int, options: tuple[int, ...]) -> list[int]:
    return [b for b in options if b <= n and n % b == 0] or [n]


def _space(target: str, M: int, N: int, K: int, full_n: bool) -> dict[str, list[int]]:
    opts = (128, 256, 512) if target == "tpu" else (32, 64, 128)
    bm = _divisors(M, (8, 16, 32, 64) + opts if target == "tpu" else (16, 32, 64, 128))[-3:]
    bn = [N] if full_n else _divisors(N, opts)[-3:]
    bk = _divisors(K, opts)[-3:] if target == "tpu" else _divisors(K, (16, 32, 64))[-2:]
    return {"block_m": bm, "block_n": bn, "block_k": bk}


def _render(task, body, target, lhs, rhs, w_t, params, kinds, dot, space, full_n) -> str:
    n_in = len(task.args)
    sig = ", ".join(f"a{i}" for i in range(n_in)) + "".join(f", {s.name}" for s in task.static)
    out_dtype = dtype_expr(dot.outvars[0].aval.dtype)
    prec = dot.params.get("precision")
    prec_expr = "None"
    if prec is not None and any(p is not None for p in (prec if isinstance(prec, tuple) else (prec,))):
        first = prec[0] if isinstance(prec, tuple) else prec
        prec_expr = f"lax.Precision.{getattr(first, 'name', 'DEFAULT')}"
    contract_w = 1 if w_t else 0
    lcast = "".join(f".astype(jnp.{c})" for c in lhs.casts)
    rcast = "".join(f".astype(jnp.{c})" for c in rhs.casts)
    dims = f"((({1},), ({contract_w},)), ((), ()))"
    loads = []
    for j, kind in enumerate(kinds):
        if kind == "scalar":
            loads.append(f"p_refs[{j}][...].reshape(())")
        elif kind == "col":
            loads.append(f"p_refs[{j}][...].reshape(p_refs[{j}].shape[-1:]) if P_SHAPES[{j}] == 1 else p_refs[{j}][...]")
        elif kind == "row":
            loads.append(f"p_refs[{j}][...][:, 0] if P_SHAPES[{j}] == 1 else p_refs[{j}][...]")
        else:
            loads.append(f"p_refs[{j}][...]")
    header = [
        f'"""mk offline author: tiled matmul with fused epilogue for {task.name} (target {target})."""',
        "import functools",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.experimental import pallas as pl",
        "from jax.experimental.pallas import tpu as pltpu" if target == "tpu" else "from jax.experimental.pallas import triton as pltriton",
        "",
        f"CONFIG_SPACE = {space!r}",
        f"PARAMS = {tuple(params)!r}",
        f"KINDS = {tuple(kinds)!r}",
        "",
        "",
        f"def _epilogue(acc{''.join(f', a{i}' for i in params)}):",
        *[f"    {l}" for l in body.lines],
        f"    return {body.outputs[0]}",
        "",
        "",
        "def _finish(acc, p_refs, o_ref, P_SHAPES):",
        f"    acc = acc.astype({out_dtype})",
        f"    out = _epilogue(acc{''.join(', ' + l for l in loads)})",
        "    out = out.reshape(out.shape + (1,)) if out.ndim == 1 else out",
        "    o_ref[...] = jnp.broadcast_to(out, o_ref.shape).astype(o_ref.dtype)",
        "",
        "",
    ]
    if target == "tpu":
        kern = [
            "def _kernel(x_ref, w_ref, *refs, nk, p_shapes):",
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
            "        _finish(acc_ref[...], p_refs, o_ref, p_shapes)",
        ]
    else:
        kern = [
            "def _kernel(x_ref, w_ref, *refs, nk, p_shapes, block_k):",
            "    p_refs, o_ref = refs[:-1], refs[-1]",
            "",
            "    def step(k, acc):",
            "        x = x_ref[:, pl.ds(k * block_k, block_k)]",
            f"        w = w_ref[{':, pl.ds(k * block_k, block_k)' if w_t else 'pl.ds(k * block_k, block_k), :'}]",
            f"        return acc + lax.dot_general(x{lcast}, w{rcast}, {dims},",
            f"                                     precision={prec_expr}, preferred_element_type=jnp.float32)",
            "",
            "    acc = lax.fori_loop(0, nk, step, jnp.zeros((x_ref.shape[0], o_ref.shape[1] if o_ref.shape[1] > 1 else "
            f"w_ref.shape[{0 if w_t else 1}]), jnp.float32))",
            "    _finish(acc, p_refs, o_ref, p_shapes)",
        ]
    call = [
        "",
        "",
        f"def kernel({sig}, *, block_m={space['block_m'][-1]}, block_n={space['block_n'][-1]}, block_k={space['block_k'][-1]}):",
        f"    ins = [{', '.join(f'a{i}' for i in range(n_in))}]",
        f"    x, w = ins[{lhs.index}], ins[{rhs.index}]",
        "    M, K = x.shape",
        f"    N = w.shape[{0 if w_t else 1}]",
        f"    out_struct = jax.eval_shape(_epilogue, jax.ShapeDtypeStruct((M, N), {out_dtype}),",
        "                                *[jax.ShapeDtypeStruct(ins[i].shape, ins[i].dtype) for i in PARAMS])",
        "    full_n = out_struct.shape != (M, N)" + (" or True" if full_n else ""),
        "    block_n = N if full_n else block_n",
        "    block_m = block_m if M % block_m == 0 else M",
        "    block_k = block_k if K % block_k == 0 else K",
        "    if N % block_n:",
        "        block_n = N",
        "    out_cols = 1 if len(out_struct.shape) == 1 else out_struct.shape[1]",
        "    p_arrays, p_specs, p_shapes = [], [], []",
        "    for i, kind in zip(PARAMS, KINDS):",
        "        p = ins[i]",
        "        if kind == 'scalar':",
        "            p_arrays.append(p.reshape((1, 1))); p_shapes.append(0)",
        "            p_specs.append(pl.BlockSpec((1, 1), lambda m, n, *k: (0, 0)))",
        "        elif kind == 'col':",
        "            p_shapes.append(p.ndim); p_arrays.append(p.reshape((1, N)))",
        "            p_specs.append(pl.BlockSpec((1, block_n), lambda m, n, *k: (0, n)))",
        "        elif kind == 'row':",
        "            p_shapes.append(p.ndim); p_arrays.append(p.reshape((M, 1)))",
        "            p_specs.append(pl.BlockSpec((block_m, 1), lambda m, n, *k: (m, 0)))",
        "        else:",
        "            p_shapes.append(2); p_arrays.append(p)",
        "            p_specs.append(pl.BlockSpec((block_m, block_n), lambda m, n, *k: (m, n)))",
        "    out_block = (block_m, block_n if out_cols != 1 or N == 1 else 1)",
        "    out_shape = jax.ShapeDtypeStruct((M, out_cols), out_struct.dtype)",
    ]
    if target == "tpu":
        call += [
            "    nk = K // block_k",
            "    w_block = (block_n, block_k) if " + str(w_t) + " else (block_k, block_n)",
            "    w_map = (lambda m, n, k: (n, k)) if " + str(w_t) + " else (lambda m, n, k: (k, n))",
            "    out = pl.pallas_call(",
            "        functools.partial(_kernel, nk=nk, p_shapes=tuple(p_shapes)),",
            "        grid=(M // block_m, N // block_n, nk),",
            "        in_specs=[pl.BlockSpec((block_m, block_k), lambda m, n, k: (m, k)), pl.BlockSpec(w_block, w_map), *p_specs],",
            "        out_specs=pl.BlockSpec(out_block, lambda m, n, k: (m, n if out_block[1] != 1 else 0)),",
            "        out_shape=out_shape,",
            "        scratch_shapes=[pltpu.VMEM((block_m, block_n), jnp.float32)],",
            "        compiler_params=pltpu.CompilerParams(dimension_semantics=('parallel', 'parallel', 'arbitrary')),",
            "    )(x, w, *p_arrays)",
        ]
    else:
        call += [
            "    block_k = min(block_k, K)",
            "    nk = K // block_k",
            "    w_block = (block_n, K) if " + str(w_t) + " else (K, block_n)",
            "    w_map = (lambda m, n: (n, 0)) if " + str(w_t) + " else (lambda m, n: (0, n))",
            "    out = pl.pallas_call(",
            "        functools.partial(_kernel, nk=nk, p_shapes=tuple(p_shapes), block_k=block_k),",
            "        grid=(M // block_m, N // block_n),",
            "        in_specs=[pl.BlockSpec((block_m, K), lambda m, n: (m, 0)), pl.BlockSpec(w_block, w_map), *p_specs],",
            "        out_specs=pl.BlockSpec(out_block, lambda m, n: (m, n if out_block[1] != 1 else 0)),",
            "        out_shape=out_shape,",
            "        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),",
            "    )(x, w, *p_arrays)",
        ]
    call += ["    return out.reshape(out_struct.shape)", ""]
    return "\n".join(header + kern + call)
