"""Algebraic rewrites of the reference's jaxpr, emitted as a pure-JAX candidate.

Valid on every backend (so measurable on a CPU). The reference is flattened
into :mod:`mk.author.ir`, simplified to a fixed point by the rules below, and
written back as whole-array ``jnp`` source with the reference's signature:

* a sum over a matrix product's output axis moves before the product
  (``sum_j (x @ W)[:, j] = x @ sum_j W[:, j]``), through scalar factors;
* constant folding of values known to be filled with one number, scalar factor
  chains folded into one, ``x*1``, ``x/1``, ``x+0`` removed, and ``x-x``,
  ``x*0`` treated as exactly zero (true for finite inputs; the frozen suite is
  the judge, as for every candidate);
* redundant casts (same dtype, lossless round trips), transposes (identity,
  pairs), reshapes and broadcasts that only add size-1 axes, reductions over
  size-1 axes, selects with a constant predicate (inference-mode dropout);
* dead code: work whose result no output depends on is dropped.

The template declines when nothing fires, or when what fires saves less than
:data:`MIN_SAVING` of the estimated work (XLA already does those itself).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np

from mk.author.emit import Unsupported
from mk.author.ir import ELEMENTWISE, Op, Program, Val, const_val, from_jaxpr, render
from mk.author.probe import arg_names, probes_for, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.task import Task

log = logging.getLogger(__name__)

#: a rewrite is proposed only if it removes at least this fraction of the estimated work
MIN_SAVING = 0.05
_MAX_PASSES = 64

Rewrite = tuple[str, Val, list[Op]]  # (rule name, replacement value, new ops computing it)


def simplify(prog: Program) -> Program:
    """Rewrite ``prog`` in place to a fixed point; ``prog.fired`` lists the rules applied."""
    for _ in range(_MAX_PASSES):
        changed = _pass(prog)
        changed = _dce(prog) or changed
        if not changed:
            return prog
    log.warning("rewrites did not reach a fixed point in %d passes", _MAX_PASSES)
    return prog


def _pass(prog: Program) -> bool:
    uses = prog.uses()
    subst: dict[int, Val] = {}
    prod: dict[int, Op] = {}
    new_ops: list[Op] = []
    changed = False

    def look(v: Val) -> Val:
        while id(v) in subst:
            v = subst[id(v)]
        return v

    seen: dict[tuple, Val] = {}
    for op in prog.ops:
        op.ins = [look(v) for v in op.ins]
        key = _cse_key(op)
        if key in seen:  # the same primitive on the same values: reuse the first result
            subst[id(op.out)] = seen[key]
            prog.fired.append("common subexpression")
            changed = True
            continue
        res = _rewrite(op, prod, uses)
        if res is None:
            new_ops.append(op)
            prod[id(op.out)] = op
            seen[key] = op.out
            continue
        name, val, extra = res
        prog.fired.append(name)
        changed = True
        for e in extra:
            new_ops.append(e)
            prod[id(e.out)] = e
        if val is not op.out:
            subst[id(op.out)] = val
    prog.ops = new_ops
    prog.outs = [look(v) for v in prog.outs]
    return changed


def _cse_key(op: Op) -> tuple:
    ins = tuple(("c", v.const, v.shape, str(v.dtype)) if v.is_const else id(v) for v in op.ins)
    return (op.prim, ins, repr(sorted(op.params.items())), op.out.shape, str(op.out.dtype))


def _dce(prog: Program) -> bool:
    kept = prog.live().ops
    dropped = len(prog.ops) - len(kept)
    if dropped:
        prog.fired.append("dead code")
    prog.ops = kept
    return bool(dropped)


# --- helpers ---------------------------------------------------------------------------------------------


def _new(prim: str, ins: list[Val], params: dict[str, Any], shape: tuple[int, ...], dtype: Any) -> Op:
    return Op(prim, ins, params, Val(tuple(shape), np.dtype(dtype)))


def _is(v: Val, value: float) -> bool:
    return v.is_const and v.const == value


def _scalar(v: Val) -> bool:
    return v.shape == () or v.is_const


def _like(x: Val, out: Val, name: str) -> Rewrite:
    """Replace ``out`` by ``x``, broadcast and cast to ``out``'s shape and dtype if they differ."""
    if x.is_const:
        return name, const_val(x.const, out.shape, out.dtype), []
    ops: list[Op] = []
    if x.shape != out.shape:
        dims = tuple(range(len(out.shape) - len(x.shape), len(out.shape)))
        ops.append(_new("broadcast_in_dim", [x], {"broadcast_dimensions": dims, "shape": out.shape, "sharding": None},
                        out.shape, x.dtype))
        x = ops[-1].out
    if x.dtype != out.dtype:
        ops.append(_new("convert_element_type", [x], {"new_dtype": out.dtype, "weak_type": False, "sharding": None},
                        out.shape, out.dtype))
    return name, (ops[-1].out if ops else x), ops


def _reshape(x: Val, out: Val, name: str) -> Rewrite:
    if x.shape == out.shape:
        return name, x, []
    op = _new("reshape", [x], {"new_sizes": out.shape, "dimensions": None, "sharding": None}, out.shape, out.dtype)
    return name, op.out, [op]


def _lossless(src: np.dtype, mid: np.dtype) -> bool:
    import jax.numpy as jnp

    if src == mid:
        return True
    same_kind = jnp.issubdtype(src, jnp.floating) == jnp.issubdtype(mid, jnp.floating) and \
        jnp.issubdtype(src, jnp.integer) == jnp.issubdtype(mid, jnp.integer)
    return bool(same_kind and jnp.promote_types(src, mid) == mid)


# --- the rules ----------------------------------------------------------------------------------------------


def _rewrite(op: Op, prod: dict[int, Op], uses: dict[int, int]) -> Rewrite | None:
    for rule in _RULES:
        res = rule(op, prod, uses)
        if res is not None:
            return res
    return None


def _fold(op: Op, prod: dict[int, Op], uses: dict[int, int]) -> Rewrite | None:
    ins, out = op.ins, op.out
    if not ins or not all(v.is_const for v in ins):
        return None
    if op.prim in ELEMENTWISE and op.bind is not None:
        try:
            res = op.bind.bind(*[np.asarray(v.const, v.dtype) for v in ins], **op.params)
        except Exception as exc:  # a primitive that does not accept scalars: leave it to XLA
            log.debug("could not fold %s: %s", op.prim, exc)
            return None
        return "constant folding", const_val(np.asarray(res).item(), out.shape, out.dtype), []
    if op.prim in ("broadcast_in_dim", "reshape", "transpose"):
        return "constant folding", const_val(ins[0].const, out.shape, out.dtype), []
    if op.prim in ("reduce_max", "reduce_min"):
        return "constant folding", const_val(ins[0].const, out.shape, out.dtype), []
    if op.prim == "reduce_sum":
        n = math.prod(ins[0].shape[a] for a in op.params["axes"])
        return "constant folding", const_val(ins[0].const * n, out.shape, out.dtype), []
    return None


def _identities(op: Op, prod: dict[int, Op], uses: dict[int, int]) -> Rewrite | None:
    p, ins, out, prim = op.params, op.ins, op.out, op.prim
    if prim == "convert_element_type":
        x = ins[0]
        if x.dtype == out.dtype:
            return "redundant cast", x, []
        inner = prod.get(id(x))
        if inner is not None and inner.prim == "convert_element_type" and _lossless(inner.ins[0].dtype, x.dtype):
            src = inner.ins[0]
            if src.dtype == out.dtype:
                return "cast round trip", src, []
            new = _new(prim, [src], dict(p), out.shape, out.dtype)
            return "cast chain", new.out, [new]
    elif prim == "mul":
        for a, b in ((0, 1), (1, 0)):
            if _is(ins[a], 1):
                return _like(ins[b], out, "multiply by one")
            if _is(ins[a], 0) and np.issubdtype(out.dtype, np.floating):
                return "multiply by zero (finite inputs)", const_val(0, out.shape, out.dtype), []
    elif prim == "div":
        if _is(ins[1], 1):
            return _like(ins[0], out, "divide by one")
        if _is(ins[0], 0) and ins[1].is_const and ins[1].const != 0:
            return "zero divided", const_val(0, out.shape, out.dtype), []
    elif prim in ("add", "add_any"):
        for a, b in ((0, 1), (1, 0)):
            if _is(ins[a], 0):
                return _like(ins[b], out, "add zero")
    elif prim == "sub":
        if _is(ins[1], 0):
            return _like(ins[0], out, "subtract zero")
        if ins[0] is ins[1] and np.issubdtype(out.dtype, np.floating):
            return "x - x (finite inputs)", const_val(0, out.shape, out.dtype), []
    elif prim == "neg":
        inner = prod.get(id(ins[0]))
        if inner is not None and inner.prim == "neg":
            return "double negation", inner.ins[0], []
    elif prim in ("max", "min"):
        if ins[0] is ins[1]:
            return _like(ins[0], out, f"{prim}(x, x)")
    elif prim == "select_n":
        if ins[0].is_const:
            return _like(ins[1 + int(ins[0].const)], out, "select with a constant predicate (e.g. inference-mode dropout)")
        if all(c is ins[1] for c in ins[2:]):
            return _like(ins[1], out, "select between equal values")
    elif prim == "transpose":
        perm = tuple(p["permutation"])
        if perm == tuple(range(len(perm))):
            return "identity transpose", ins[0], []
        inner = prod.get(id(ins[0]))
        if inner is not None and inner.prim == "transpose":
            first = tuple(inner.params["permutation"])
            composed = tuple(first[i] for i in perm)
            if composed == tuple(range(len(composed))):
                return "transpose pair", inner.ins[0], []
            new = _new("transpose", [inner.ins[0]], {"permutation": composed}, out.shape, out.dtype)
            return "transpose chain", new.out, [new]
    elif prim == "reshape":
        if p.get("dimensions") is None:
            if ins[0].shape == out.shape:
                return "identity reshape", ins[0], []
            inner = prod.get(id(ins[0]))
            if inner is not None and inner.prim == "reshape" and inner.params.get("dimensions") is None:
                return _reshape(inner.ins[0], out, "reshape chain")
    elif prim == "broadcast_in_dim":
        x = ins[0]
        dims = tuple(p["broadcast_dimensions"])
        if x.size == out.size and list(dims) == sorted(dims) and x.dtype == out.dtype:
            if x.shape == out.shape:
                return "identity broadcast", x, []
            return _reshape(x, out, "broadcast that only adds size-1 axes")
    elif prim in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or"):
        axes = tuple(p["axes"])
        if all(ins[0].shape[a] == 1 for a in axes) and ins[0].dtype == out.dtype:
            return _reshape(ins[0], out, "reduction over size-1 axes")
    return None


_LINEAR = ("mul", "div", "neg")


def _sum_before_matmul(op: Op, prod: dict[int, Op], uses: dict[int, int]) -> Rewrite | None:
    """reduce_sum over a product's free axes, through scalar factors -> reduce the operand first."""
    if op.prim != "reduce_sum":
        return None
    chain: list[tuple[Op, int]] = []  # (linear op, index of the chain operand)
    y = op.ins[0]
    while True:
        if uses.get(id(y), 0) != 1:
            return None
        src = prod.get(id(y))
        if src is None:
            return None
        if src.prim == "dot_general":
            break
        if src.prim not in _LINEAR:
            return None
        if src.prim == "neg":
            pos = 0
        elif src.prim == "mul":
            pos = 0 if _scalar(src.ins[1]) else 1 if _scalar(src.ins[0]) else -1
        else:  # div: the chain value must be the numerator
            pos = 0 if _scalar(src.ins[1]) else -1
        if pos < 0 or src.ins[pos].shape != src.out.shape:
            return None
        chain.append((src, pos))
        y = src.ins[pos]
    dot = src
    if any(v.dtype not in (np.float32, np.float64) for v in dot.ins):
        return None  # a low-precision pre-reduction would lose accuracy the product keeps
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    lhs, rhs = dot.ins
    lfree = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
    rfree = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
    nb = len(lb)
    axes = tuple(op.params["axes"])
    lmove = [lfree[a - nb] for a in axes if nb <= a < nb + len(lfree)]
    rmove = [rfree[a - nb - len(lfree)] for a in axes if a >= nb + len(lfree)]
    if not lmove and not rmove:
        return None
    new_ops: list[Op] = []

    def reduce(x: Val, move: list[int]) -> Val:
        if not move:
            return x
        shape = tuple(s for i, s in enumerate(x.shape) if i not in move)
        new_ops.append(_new("reduce_sum", [x], {"axes": tuple(sorted(move)), "out_sharding": None}, shape, x.dtype))
        return new_ops[-1].out

    def renumber(idx: tuple[int, ...], move: list[int]) -> tuple[int, ...]:
        return tuple(i - sum(m < i for m in move) for i in idx)

    new_dn = ((renumber(lc, lmove), renumber(rc, rmove)), (renumber(lb, lmove), renumber(rb, rmove)))
    moved_out = [a for a in axes if a >= nb]
    shape = tuple(s for i, s in enumerate(dot.out.shape) if i not in moved_out)
    params = dict(dot.params, dimension_numbers=new_dn)
    new_ops.append(_new("dot_general", [reduce(lhs, lmove), reduce(rhs, rmove)], params, shape, dot.out.dtype))
    cur = new_ops[-1].out
    for lin, pos in reversed(chain):
        others = [const_val(v.const, shape if v.shape else (), v.dtype) if v.is_const and i != pos else v
                  for i, v in enumerate(lin.ins)]
        others[pos] = cur
        new_ops.append(_new(lin.prim, others, dict(lin.params), shape, lin.out.dtype))
        cur = new_ops[-1].out
    rest = renumber(tuple(a for a in axes if a not in moved_out), moved_out)
    if rest:
        new_ops.append(_new("reduce_sum", [cur], {"axes": rest, "out_sharding": None}, op.out.shape, op.out.dtype))
        cur = new_ops[-1].out
    if cur.shape != op.out.shape:
        return None
    return "sum moved before the matrix product", cur, new_ops


def _reaches_dot(v: Val, prod: dict[int, Op], uses: dict[int, int]) -> bool:
    """``v`` is a product's output through single-use scalar factors and additions."""
    while uses.get(id(v), 0) == 1 and id(v) in prod:
        src = prod[id(v)]
        if src.prim == "dot_general":
            return True
        if src.prim not in _LINEAR + ("add", "sub"):
            return False
        v = max(src.ins, key=lambda x: (x.shape == src.out.shape, not x.is_const))
    return False


def _sum_over_add(op: Op, prod: dict[int, Op], uses: dict[int, int]) -> Rewrite | None:
    """sum(a + b) -> sum(a) + sum(b) when a leads to a product (so the sum can then move before it)."""
    if op.prim != "reduce_sum" or uses.get(id(op.ins[0]), 0) != 1:
        return None
    y = op.ins[0]
    add = prod.get(id(y))
    if add is None or add.prim not in ("add", "sub") or not np.issubdtype(y.dtype, np.floating):
        return None
    if not any(_reaches_dot(v, prod, uses) for v in add.ins):
        return None
    axes = tuple(op.params["axes"])
    if any(len(v.shape) not in (0, len(y.shape)) for v in add.ins):
        return None
    new_ops: list[Op] = []
    parts = []
    for v in add.ins:
        if v.shape == ():
            n = math.prod(y.shape[a] for a in axes)
            new_ops.append(_new("mul", [v, const_val(n, (), v.dtype)], {}, (), v.dtype))
            parts.append(new_ops[-1].out)
            continue
        shape = tuple(s for i, s in enumerate(v.shape) if i not in axes)
        if v.is_const:
            n = math.prod(y.shape[a] for a in axes)
            parts.append(const_val(v.const * n, shape, v.dtype))
            continue
        new_ops.append(_new("reduce_sum", [v], {"axes": axes, "out_sharding": None}, shape, v.dtype))
        cur = new_ops[-1].out
        n = math.prod(y.shape[a] for a in axes if v.shape[a] == 1)  # broadcast along a summed axis
        if n != 1:
            new_ops.append(_new("mul", [cur, const_val(n, (), v.dtype)], {}, shape, v.dtype))
            cur = new_ops[-1].out
        parts.append(cur)
    new_ops.append(_new(add.prim, parts, {}, op.out.shape, op.out.dtype))
    return "sum distributed over an addition", new_ops[-1].out, new_ops


def _scale_chain(op: Op, prod: dict[int, Op], uses: dict[int, int]) -> Rewrite | None:
    """(x op1 c1) op2 c2 with op in {mul, div} and scalar constants -> x * c."""
    if op.prim not in ("mul", "div") or not (op.ins[1].is_const and op.ins[1].shape == ()):
        return None
    x = op.ins[0]
    inner = prod.get(id(x))
    if inner is None or uses.get(id(x), 0) != 1 or inner.prim not in ("mul", "div"):
        return None
    if not (inner.ins[1].is_const and inner.ins[1].shape == ()) or inner.ins[0].shape != op.out.shape:
        return None
    f1 = float(inner.ins[1].const) if inner.prim == "mul" else 1.0 / float(inner.ins[1].const)
    f2 = float(op.ins[1].const) if op.prim == "mul" else 1.0 / float(op.ins[1].const)
    if not np.isfinite(f1 * f2) or inner.ins[1].dtype != op.ins[1].dtype:
        return None
    new = _new("mul", [inner.ins[0], const_val(f1 * f2, (), op.ins[1].dtype)], {}, op.out.shape, op.out.dtype)
    return "scalar factors folded", new.out, [new]


_RULES: tuple[Callable[[Op, dict[int, Op], dict[int, int]], Rewrite | None], ...] = (
    _fold, _identities, _sum_before_matmul, _sum_over_add, _scale_chain)


# --- the template ---------------------------------------------------------------------------------------------


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    probes = probes_for(task, traced)
    programs = []
    before = None
    for t in probes.traces:
        prog = from_jaxpr(t.jaxpr)
        before = before if before is not None else prog.cost()
        programs.append(simplify(prog))
    p0 = programs[0]
    fired = sorted(set(p0.fired))
    if not fired:
        raise Unsupported("no algebraic rewrite applies")
    after = p0.cost()
    saving = 1.0 - after / before if before else 0.0
    if saving < MIN_SAVING:
        raise Unsupported(f"the rewrites that apply ({', '.join(fired)}) save {saving:.1%} of the estimated work, "
                          f"under {MIN_SAVING:.0%}; XLA does such simplifications itself")
    names = arg_names(task)
    lines, outs = render(programs, probes, names)
    source = _source(task, names, probes.used(*lines, *outs), lines, outs, fired, saving)
    return Proposal(
        name="rewrite-jax",
        source=source,
        rationale=f"algebraic rewrite of the reference in pure JAX ({'; '.join(fired)}): "
        f"{saving:.0%} less estimated work at scale {traced[0].scale}; valid on every backend",
        template="rewrite",
    )


def _source(task: Task, names: list[str], used: list, lines: list[str], outs: list[str], fired: list[str],
            saving: float) -> str:
    ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
    body = [f"    {v.name} = {v.source}" for v in used if v.name != v.source] + [f"    {line}" for line in lines]
    return "\n".join([
        f'"""mk offline author: algebraic rewrite of {task.name} in pure JAX (valid on every backend).',
        "",
        "Rewrites applied: " + "; ".join(fired) + ".",
        f"Estimated work saved: {saving:.0%} (at the authoring size). Sizes and static values are read from the",
        "arguments at trace time.",
        '"""',
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "",
        "",
        f"def kernel({signature(task, '')}):",
        *body,
        f"    return {ret}",
        "",
    ])
