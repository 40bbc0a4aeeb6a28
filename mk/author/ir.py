"""A small whole-array IR of a jaxpr, for algebraic rewrites, and its source.

:func:`from_jaxpr` flattens a traced reference (nested ``jit`` /
``custom_jvp`` calls inlined) into a list of :class:`Op` over SSA
:class:`Val` values; scalar literals and values known to be filled with one
number carry it in ``Val.const``. :func:`render` writes a rewritten program
back as plain ``jnp``/``lax`` source over whole arrays. It shares the
primitive tables of :mod:`mk.author.emit`; shapes and constants that follow the
inputs' sizes or static values (:mod:`mk.author.probe`) are written as
expressions over them, so the source is correct for sizes it was never traced at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mk.author.emit import _BINARY, _INLINE, _REDUCE, _UNARY, Unsupported, dtype_expr, exact_form

#: elementwise primitives (output shape = broadcast of the inputs)
ELEMENTWISE = frozenset(_UNARY) | frozenset(_BINARY) | {
    "integer_pow", "convert_element_type", "select_n", "clamp", "reduce_precision"}


@dataclass(eq=False)
class Val:
    """One SSA value. ``const`` set: every element equals it. ``arg``: the task input index."""

    shape: tuple[int, ...]
    dtype: np.dtype
    const: Any = None
    arg: int | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(eq=False)
class Op:
    prim: str
    ins: list[Val]
    params: dict[str, Any]
    out: Val
    bind: Any = None  # the jax Primitive, for folding constants


@dataclass
class Program:
    args: list[Val]
    ops: list[Op]
    outs: list[Val]
    fired: list[str] = field(default_factory=list)  # names of the rewrites applied

    def uses(self) -> dict[int, int]:
        n: dict[int, int] = {}
        for op in self.ops:
            for v in op.ins:
                n[id(v)] = n.get(id(v), 0) + 1
        for v in self.outs:
            n[id(v)] = n.get(id(v), 0) + 2  # an output is never "single use"
        return n

    def producers(self) -> dict[int, Op]:
        return {id(op.out): op for op in self.ops}

    def live(self) -> "Program":
        """This program without the ops its outputs do not need."""
        need, keep = {id(o) for o in self.outs}, []
        for op in reversed(self.ops):
            if id(op.out) in need:
                keep.append(op)
                need.update(id(x) for x in op.ins)
        return Program(self.args, keep[::-1], self.outs)

    def cost(self) -> float:
        """A rough work estimate: flops of products and reductions, elements written otherwise."""
        total = 0.0
        for op in self.ops:
            if op.prim == "dot_general":
                (lc, _), _ = op.params["dimension_numbers"]
                k = math.prod(op.ins[0].shape[a] for a in lc)
                total += 2.0 * op.out.size * k
            elif op.prim.startswith("reduce_") or op.prim.startswith("arg"):
                total += op.ins[0].size
            else:
                total += op.out.size
        return total


def derives(v: Val, roots: set[int], prod: dict[int, Op], memo: dict[int, bool] | None = None) -> bool:
    """Whether ``v`` is computed from a value whose id is in ``roots`` (through any ops of ``prod``); ``memo`` keeps
    the answers for one ``roots`` across calls."""
    memo = {} if memo is None else memo
    if id(v) in roots:
        return True
    if id(v) in memo:
        return memo[id(v)]
    op = prod.get(id(v))
    memo[id(v)] = False
    out = op is not None and any(derives(x, roots, prod, memo) for x in op.ins)
    memo[id(v)] = out
    return out


def const_val(value: Any, shape: tuple[int, ...], dtype: Any) -> Val:
    return Val(tuple(shape), np.dtype(dtype), const=np.asarray(value, dtype=np.dtype(dtype)).item())


def from_jaxpr(closed: Any) -> Program:
    """Flatten a ClosedJaxpr into a Program; raises Unsupported for what it cannot represent."""
    jaxpr = closed.jaxpr
    env: dict[Any, Val] = {}
    args = []
    for i, v in enumerate(jaxpr.invars):
        val = Val(tuple(v.aval.shape), np.dtype(v.aval.dtype), arg=i)
        env[v] = val
        args.append(val)
    _bind_consts(jaxpr.constvars, closed.consts, env)
    ops: list[Op] = []
    _flatten(jaxpr, env, ops)
    outs = [_read(env, v) for v in jaxpr.outvars]
    return Program(args, ops, outs)


def _bind_consts(constvars: Any, consts: Any, env: dict[Any, Val]) -> None:
    for v, c in zip(constvars, consts):
        arr = np.asarray(c)
        flat = arr.reshape(-1)
        if flat.size == 0 or not np.all(flat == flat[0]):
            raise Unsupported("the computation closes over a non-uniform array constant")
        env[v] = const_val(flat[0], arr.shape, arr.dtype)


def _read(env: dict[Any, Val], atom: Any) -> Val:
    from jax._src.core import Literal

    if isinstance(atom, Literal):
        arr = np.asarray(atom.val)
        if arr.shape != ():
            flat = arr.reshape(-1)
            if not np.all(flat == flat[0]):
                raise Unsupported("a non-uniform array constant is baked into the computation")
            return const_val(flat[0], arr.shape, atom.aval.dtype)
        return const_val(arr.item(), (), atom.aval.dtype)
    if atom not in env:
        raise Unsupported("the computation reads a value it does not define")
    return env[atom]


def _flatten(jaxpr: Any, env: dict[Any, Val], ops: list[Op]) -> None:
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
            _flatten(inner, env, ops)
            for outer, v in zip(eqn.outvars, inner.outvars):
                env[outer] = _read(env, v)
            continue
        if name == "split":  # one slice per piece: the recognisers and the writers know slices
            _split(eqn, ins[0], env, ops)
            continue
        if len(eqn.outvars) != 1:
            raise Unsupported(f"primitive {name!r} with several outputs")
        o = eqn.outvars[0]
        out = Val(tuple(o.aval.shape), np.dtype(o.aval.dtype))
        params = dict(eqn.params)
        if name in ("squeeze", "expand_dims"):  # one shape-changing form: reshape
            name, params = "reshape", {"new_sizes": out.shape, "dimensions": None}
        ops.append(Op(name, ins, params, out, eqn.primitive))
        env[o] = out


# --- source ------------------------------------------------------------------------------------------


class _Dims:
    """Writes shapes and constants that vary with the inputs' sizes or static values as expressions over them."""

    def __init__(self, probes: Any):
        self.probes = probes

    def shape(self, shapes: list[tuple[int, ...]]) -> str:
        try:
            return self.probes.shape(shapes)
        except ValueError as exc:
            raise Unsupported(str(exc)) from exc

    def number(self, values: list[Any], dtype: Any = None) -> str:
        expr = self.probes.fit(values, dtype=dtype)
        if expr is not None:
            return expr
        v0 = values[0]
        if all(v == v0 or (isinstance(v, float) and math.isnan(v) and math.isnan(v0)) for v in values):
            if isinstance(v0, float) and not np.isfinite(v0):
                return f'float("{v0}")'
            return repr(v0)
        raise Unsupported(f"a constant changes with the inputs' sizes or static values ({values}) and is not a "
                          "function of them")


def render(programs: list[Program], probes: Any, names: list[str]) -> tuple[list[str], list[str]]:
    """Source lines computing the program's outputs from the inputs ``names`` (one program per trace of ``probes``)."""
    p0 = programs[0]
    for p in programs[1:]:
        if [o.prim for o in p.ops] != [o.prim for o in p0.ops] or len(p.outs) != len(p0.outs):
            raise Unsupported("the rewritten computation's structure changes with the inputs' sizes or static values")
    dims = _Dims(probes)
    taken = set(names) | {v.name for v in probes.vars}
    vnames = (f"v{k}" for k in range(10**6) if f"v{k}" not in taken)
    values: dict[int, str] = {id(v): names[v.arg] for v in p0.args}
    lines: list[str] = []

    def ref(vals: list[Val]) -> str:
        v = vals[0]
        if v.is_const:
            num = dims.number([x.const for x in vals], v.dtype)
            if v.shape == ():
                return f"jnp.asarray({num}, {dtype_expr(v.dtype)})"
            return f"jnp.full({dims.shape([x.shape for x in vals])}, {num}, {dtype_expr(v.dtype)})"
        return values[id(v)]

    for k, op in enumerate(p0.ops):
        peers = [p.ops[k] for p in programs]
        ins = [ref([q.ins[j] for q in peers]) for j in range(len(op.ins))]
        shape = dims.shape([q.out.shape for q in peers])
        expr = _expr(op, ins, shape)
        name = next(vnames)
        lines.append(f"{name} = {expr}")
        values[id(op.out)] = name
    outs = [ref([p.outs[j] for p in programs]) for j in range(len(p0.outs))]
    return lines, outs


def _expr(op: Op, ins: list[str], shape: str) -> str:
    p = op.params
    prim = op.prim
    exact = exact_form(prim, p, op.out.dtype, ins)
    if exact is not None:
        return exact
    if prim in _UNARY:
        return _UNARY[prim].format(ins[0])
    if prim in _BINARY:
        return _BINARY[prim].format(ins[0], ins[1])
    if prim == "integer_pow":
        return f"lax.integer_pow({ins[0]}, {int(p['y'])})"
    if prim == "convert_element_type":
        return f"jnp.asarray({ins[0]}).astype({dtype_expr(p['new_dtype'])})"
    if prim == "select_n":
        if len(ins) == 3:
            return f"jnp.where({ins[0]}, {ins[2]}, {ins[1]})"
        return f"lax.select_n({', '.join(ins)})"
    if prim == "clamp":
        return f"jnp.clip({ins[1]}, {ins[0]}, {ins[2]})"
    if prim == "reduce_precision":
        return f"lax.reduce_precision({ins[0]}, {p['exponent_bits']}, {p['mantissa_bits']})"
    if prim in _REDUCE:
        if prim in ("argmax", "argmin"):
            return f"{_REDUCE[prim]}({ins[0]}, axis={p['axes'][0]}).astype({dtype_expr(p['index_dtype'])})"
        return f"{_REDUCE[prim]}({ins[0]}, axis={tuple(p['axes'])!r})"
    if prim == "broadcast_in_dim":
        return f"lax.broadcast_in_dim({ins[0]}, {shape}, {tuple(p['broadcast_dimensions'])!r})"
    if prim == "reshape":
        return f"jnp.reshape({ins[0]}, {shape})"
    if prim == "transpose":
        return f"jnp.transpose({ins[0]}, {tuple(p['permutation'])!r})"
    if prim == "iota":
        return f"lax.broadcasted_iota({dtype_expr(p['dtype'])}, {shape}, {int(p['dimension'])})"
    if prim == "dot_general":
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        dn = f"(({tuple(lc)!r}, {tuple(rc)!r}), ({tuple(lb)!r}, {tuple(rb)!r}))"
        pet = p.get("preferred_element_type")
        f32 = any(str(v.dtype) == "float32" for v in op.ins)
        return (f"lax.dot_general({ins[0]}, {ins[1]}, {dn}, precision={xla_precision(p.get('precision'), f32)}, "
                f"preferred_element_type={dtype_expr(pet) if pet is not None else 'None'})")
    raise Unsupported(f"primitive {prim!r} has no whole-array form in mk's rewriter")


def stated_precision(eqn: Any) -> str:
    """:func:`xla_precision` for a reference's dot or convolution equation: HIGHEST where its operands are float32
    (or complex64) and it leaves precision at the default."""
    f32 = any(str(getattr(v.aval, "dtype", "")) in ("float32", "complex64") for v in eqn.invars)
    return xla_precision(eqn.params.get("precision"), f32)


def xla_precision(prec: Any, f32: bool = False) -> str:
    """The precision a written dot states. A float32 dot the reference leaves at the default gets HIGHEST: the judge
    runs the reference at HIGHEST (so does a float32 task's user who checks the kernel against it), and XLA's
    default is one bf16 pass on a TPU and TF32 on a GPU."""
    unset = prec is None or (isinstance(prec, tuple) and all(x is None or getattr(x, "name", "") == "DEFAULT" for x in prec)) \
        or getattr(prec, "name", "") == "DEFAULT"
    if unset:
        return "lax.Precision.HIGHEST" if f32 else "None"
    if isinstance(prec, tuple):
        return "(" + ", ".join(f"lax.Precision.{getattr(x, 'name', 'DEFAULT')}" for x in prec) + ")"
    return f"lax.Precision.{getattr(prec, 'name', 'DEFAULT')}"


def _split(eqn: Any, x: Val, env: dict[Any, Val], ops: list[Op]) -> None:
    """``split`` (``jnp.split``, ``rotate_half``'s halves) as one ``slice`` per piece along its axis."""
    from jax import lax

    axis, start = int(eqn.params["axis"]), 0
    for o, size in zip(eqn.outvars, eqn.params["sizes"]):
        starts = tuple(start if a == axis else 0 for a in range(len(x.shape)))
        limits = tuple(start + int(size) if a == axis else n for a, n in enumerate(x.shape))
        out = Val(tuple(o.aval.shape), np.dtype(o.aval.dtype))
        ops.append(Op("slice", [x], {"start_indices": starts, "limit_indices": limits, "strides": None}, out,
                      lax.slice_p))
        env[o] = out
        start += int(size)

