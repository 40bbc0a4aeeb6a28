"""The score modification of an attention core: what the reference does to ``q k^T`` before its row softmax.

FlexAttention's ``score_mod`` read from the jaxpr: the elementwise ops from the
first product to the operand of the softmax's row max (a scale, a soft cap
``c * tanh(s / c)``, a boolean or additive mask, a sliding window, casts), and
the values from outside the scores they read ("sides": a padding mask from an
input, an additive bias, a mask made from ``iota``). Each side is kept at its
compact size (before the broadcasts and size-1 reshapes that make it
score-shaped) and becomes a rank-4 array broadcastable to (batch, head,
query, key), which the flash-attention kernels stream block by block; the ops
are written as a function of one score tile and the side tiles, which the
kernel applies to every tile (mk.kernels.flash_attention's ``mod``). Booleans
and integers travel as float32 (Mosaic and Triton load those tiles
everywhere) and are turned back inside the function.

Nothing here decides that the modification is right: the recogniser that uses
it (:mod:`mk.author.mla`) runs the written program with a plain-JAX core
against the reference on probe inputs and declines when they differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mk.author import ir
from mk.author.emit import Unsupported, dtype_expr
from mk.author.ir import Op, Program, Val

#: the prims a modification made only of a scale and a causal mask uses (the kernel's own flags cover it)
_PLAIN = frozenset({"mul", "div", "convert_element_type", "select_n"})


@dataclass
class ScoreMod:
    scores: Val  # the first product's output
    ops: list[Op]  # the elementwise ops from ``scores`` to ``out``, in program order
    out: Val  # the operand of the softmax's row max
    sides: list[Val]  # score-shaped values from outside the scores that ``ops`` read
    bases: list[Val]  # each side before its broadcasts and size-1 reshapes
    steps: list[list[str]]  # per side: lines turning ``x`` (its base) into an array broadcastable to the scores
    producers: dict[int, Op] = field(default_factory=dict)  # the program's op making each value (by id)

    def plain(self, inputs: set[int], prod: dict[int, Op]) -> bool:
        """Only a scale, casts and masks made without the inputs (causal): the kernel's scale and causal flag."""
        return {op.prim for op in self.ops} <= _PLAIN and not any(ir.derives(b, inputs, prod) for b in self.bases)

    def key(self) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
        return tuple(op.prim for op in self.ops), tuple(tuple(s) for s in self.steps)


def find(prog: Program, i1: int, i2: int) -> ScoreMod:
    """The modification between the first product (``prog.ops[i1]``) and the softmax's row max before ``i2``."""
    prod = prog.producers()
    scores = prog.ops[i1].out
    root = {id(scores)}
    imax = next((k for k in range(i1 + 1, i2) if prog.ops[k].prim == "reduce_max"
                 and ir.derives(prog.ops[k].ins[0], root, prod)), None)
    if imax is None:
        raise Unsupported("no row max over the scores before the second product")
    if tuple(prog.ops[imax].params["axes"]) != (len(scores.shape) - 1,):
        raise Unsupported("the softmax is not over the key axis")
    out = prog.ops[imax].ins[0]
    needed, ops = {id(out)}, []
    for op in reversed(prog.ops[i1 + 1:imax]):
        if id(op.out) in needed and ir.derives(op.out, root, prod):
            ops.append(op)
            needed.update(id(x) for x in op.ins)
    ops.reverse()
    made = {id(scores)} | {id(op.out) for op in ops}
    sides: list[Val] = []
    for op in ops:
        if op.prim not in ir.ELEMENTWISE or op.out.shape != scores.shape:
            raise Unsupported(f"the scores pass through {op.prim!r} on their way to the softmax: not elementwise")
        for x in op.ins:
            if id(x) in made or x.is_const or any(x is s for s in sides):
                continue
            if x.shape and (len(x.shape) != len(scores.shape)
                            or any(a not in (1, b) for a, b in zip(x.shape, scores.shape))):
                raise Unsupported(f"a value of shape {x.shape} modifies the scores {scores.shape}")
            sides.append(x)
    bases, steps, kept, uniform = [], [], [], {}
    for x in sides:
        base, lines = _compact(x, prod, len(scores.shape))
        if base.is_const:  # a fill value broadcast to the scores' shape: a scalar in the tile function
            uniform[id(x)] = ir.const_val(base.const, (), x.dtype)
            continue
        kept.append(x)
        bases.append(base)
        steps.append(lines)
    ops = [Op(op.prim, [uniform.get(id(x), x) for x in op.ins], op.params, op.out, op.bind) for op in ops]
    return ScoreMod(scores, ops, out, kept, bases, steps, prod)


def _compact(v: Val, prod: dict[int, Op], rank: int) -> tuple[Val, list[str]]:
    """(the value before ``v``'s broadcasts and size-1 reshapes, lines turning ``x`` (that value) into an array of the
    scores' rank with size-1 axes where ``v`` is broadcast)."""
    steps: list[str] = []
    while v.arg is None and id(v) in prod:
        op = prod[id(v)]
        x = op.ins[0]
        if op.prim == "broadcast_in_dim":
            dims = tuple(op.params["broadcast_dimensions"])
            if list(dims) != sorted(dims):
                break
            new = tuple(i for i in range(len(v.shape)) if i not in dims)
            if new:
                steps.append(f"x = lax.expand_dims(x, {new!r})")
        elif op.prim == "convert_element_type" and x.is_const:  # a fill value cast to the scores' dtype
            return ir.const_val(x.const, (), op.out.dtype), []
        elif op.prim == "reshape" and [d for d in x.shape if d != 1] == [d for d in v.shape if d != 1]:
            steps.append(size_one_reshape(x.shape, v.shape))
        else:
            break
        v = x
    steps = steps[::-1]
    if not steps and len(v.shape) < rank:
        steps.append(f"x = x.reshape((1,) * ({rank} - x.ndim) + x.shape)")
    kind = np.dtype(v.dtype)
    if kind == np.bool_ or np.issubdtype(kind, np.integer):
        steps.append("x = x.astype(jnp.float32)")
    return v, steps


def size_one_reshape(src: tuple[int, ...], dst: tuple[int, ...], x: str = "x") -> str:
    """A reshape that only inserts or drops size-1 axes, written over ``x``'s own sizes: each target axis takes the
    next source axis of its size (a batch of 1 at the authoring size is ``x.shape[0]``, not a literal 1)."""
    parts, i = [], 0
    for d in dst:
        while i < len(src) and src[i] == 1 and d != 1:
            i += 1  # a dropped size-1 axis
        if i < len(src) and src[i] == d:
            parts.append(f"{x}.shape[{i}]")
            i += 1
        else:
            parts.append("1")
    return f"{x} = {x}.reshape(({', '.join(parts)}{',' if len(parts) == 1 else ''}))"


def side_lines(mod: ScoreMod, names: list[str], out: list[str]) -> list[str]:
    """Kernel-body lines making each side (its base is the prefix value ``names[j]``) into ``out[j]``."""
    lines = []
    for j, (name, dst) in enumerate(zip(names, out)):
        lines.append(f"x = {name}")
        lines += mod.steps[j]
        if len(mod.scores.shape) == 3:  # (batch, query, key) scores: the kernels' one head
            lines.append("x = jnp.expand_dims(x, 1)")
        lines.append(f"{dst} = x")
    return lines


def render(mods: list[ScoreMod], probes: Any, fn: str = "_score_mod", wide: bool = False) -> list[str]:
    """``def _score_mod(s, t0, ...)``: one score tile (float32, as the kernel's product gives it) and the side tiles
    in, the scores the softmax sees out; a nested function of ``kernel`` (its constants may read the sizes; a Pallas
    kernel cannot close over arrays, so a computed number is a side too, one element). Arithmetic runs in float32:
    a 16-bit step (the reference's bf16 scores, its scale in bf16) is its float32 result rounded to that dtype, which
    is what the 16-bit operation gives (Triton has no bf16 division, a v5e no bf16 vector unit). ``wide``: nothing
    rounded (the recogniser checks the structure against the reference run on float32 copies, where the reference
    rounds nothing; the kernel's rounding is the judge's to compare)."""
    m0 = mods[0]
    params = ["s"] + [f"t{j}" for j in range(len(m0.sides))]
    programs, held = [], []
    for m in mods:
        for j, x in enumerate([m.scores, *m.sides]):
            held.append((x, x.arg))  # a side may be a task input itself: its index is put back
            x.arg = j
        programs.append(Program([m.scores, *m.sides], [_scalar_consts(op) for op in m.ops], [m.out]))
    try:
        body, outs = ir.render(programs, probes, params)
    finally:
        for x, arg in reversed(held):
            x.arg = arg
    lines = [f"def {fn}({', '.join(params)}):"]
    for j, base in enumerate(m0.bases):
        kind = np.dtype(base.dtype)
        if kind == np.bool_:
            lines.append(f"    t{j} = t{j} != 0")
        elif np.issubdtype(kind, np.integer):
            lines.append(f"    t{j} = t{j}.astype({dtype_expr(kind)})")
    if _narrow(m0.scores.dtype) and not wide:
        lines.append(f"    s = s.astype({dtype_expr(m0.scores.dtype)}).astype(jnp.float32)")
    for line, op in zip(body, m0.ops):  # ir.render writes one line per op, in order
        lines.append(f"    {line}")
        if _narrow(op.out.dtype) and not wide:
            name = line.split(" = ", 1)[0]
            lines.append(f"    {name} = {name}.astype({dtype_expr(op.out.dtype)}).astype(jnp.float32)")
    lines.append(f"    return {outs[0]}")
    return lines


def _narrow(dtype: Any) -> bool:
    """A float narrower than float32 (bfloat16, float16; numpy calls bfloat16 kind "V")."""
    kind = np.dtype(dtype)
    return bool(kind.itemsize < 4 and (kind.kind == "f" or kind.name.startswith(("bfloat", "float"))))


def _scalar_consts(op: Op) -> Op:
    """``op`` with its uniform array constants as scalars (the ops run on 2-D tiles; a 16-bit constant stays one, as
    the reference rounds it, and promotes to float32 against a float32 tile) and its 16-bit casts as float32 ones
    (:func:`render` rounds after each 16-bit op)."""
    f32 = np.dtype(np.float32)
    ins = [ir.const_val(x.const, (), x.dtype) if x.is_const and x.shape else x for x in op.ins]
    params = op.params
    if op.prim == "convert_element_type" and _narrow(params["new_dtype"]):
        params = {**params, "new_dtype": f32}
    return Op(op.prim, ins, params, op.out, op.bind)


#: a mask's fill at or below which masking a score equals leaving its key out: exp(fill - max) is 0 unless the real
#: scores reach below it. GPT-2's -1e4 is not (set 3's gpt2 attention: with outlier inputs the masked future keys
#: won the softmax, and a kernel that skipped them was 5e7 off); -1e9 (jaxbench 1p, MaxText; -998244352 in bf16),
#: -inf and the dtype's lowest are, and a fill above it is computed where it is, every key block visited.
EXCLUDING_FILL = -1e8


def keeps(mod: ScoreMod, causal: bool) -> bool:
    """Whether the masks of a plain modification (made without the inputs) keep exactly the scores the kernel's causal
    flag keeps (key j for query i when j <= i; every key when not causal), evaluated at this trace's sizes: a window
    wider than the authoring sequence looks causal there, and only there. A mask whose fill is above
    :data:`EXCLUDING_FILL` never does: its masked scores take part in the softmax.

    The masks are computed in one jitted program over compact values (a (S, S) mask stays (1, 1, S, S) however many
    batches and heads it is broadcast over), which XLA fuses into the comparisons: no mask is held in memory at the
    scores' size, even at 4x64x4096x4096 or a held-out 12288."""
    import jax
    import jax.numpy as jnp

    selects = [op for op in mod.ops if op.prim == "select_n" and len(op.ins) == 3 and not op.ins[0].is_const]
    for op in selects:
        fill = op.ins[1] if _on_scores(op.ins[2], op.ins[1], mod) else op.ins[2]
        if not fill.is_const or not float(fill.const) <= EXCLUDING_FILL:
            return False  # a finite fill (GPT-2's -1e4) wins the softmax once the real scores fall below it
    rows, cols = mod.scores.shape[-2:]

    def check() -> Any:
        value = _evaluator(mod)
        same = jnp.bool_(True)
        kept = jnp.ones((1, 1), bool)
        for op in selects:
            pred = value(op.ins[0])
            keep = pred if _on_scores(op.ins[2], op.ins[1], mod) else ~pred
            keep = keep.reshape((1,) * (len(mod.scores.shape) - keep.ndim) + keep.shape)
            lead = keep.reshape(-1, *keep.shape[-2:])
            same &= jnp.all(lead == lead[0])  # differs across batch or heads: not the kernel's mask
            kept = kept & lead[0]
        want = (jax.lax.broadcasted_iota(jnp.int32, (rows, cols), 1) <= jax.lax.broadcasted_iota(
            jnp.int32, (rows, cols), 0)) if causal else jnp.ones((rows, cols), bool)
        return same & jnp.all(jnp.broadcast_to(kept, (rows, cols)) == want)

    return bool(jax.jit(check)())


def _on_scores(a: Val, b: Val, mod: ScoreMod) -> bool:
    """Whether ``a`` (not ``b``) carries the scores."""
    made = {id(mod.scores)} | {id(op.out) for op in mod.ops}
    return id(a) in made and id(b) not in made


def _evaluator(mod: ScoreMod) -> Any:
    """A function giving the value of a mask made without the inputs (iota, comparisons, broadcasts) from its jaxpr
    ops, traced inside :func:`keeps`'s jit. Values stay compact: each has its Val's rank with size one along every axis
    it was only broadcast over (a broadcast_in_dim adds size-one axes; an elementwise op broadcasts its inputs to their
    common shape); any other op sees its inputs at their full sizes."""
    import jax.numpy as jnp

    done: dict[int, Any] = {}

    def full(x: Val, got: Any) -> Any:
        return jnp.broadcast_to(got, x.shape)

    def value(x: Val) -> Any:
        if x.is_const:
            return jnp.full((1,) * len(x.shape), x.const, x.dtype)
        if id(x) in done:
            return done[id(x)]
        op = mod.producers.get(id(x))
        if op is None:
            raise Unsupported("a mask on the scores reads a value it does not make")
        ins = [value(i) for i in op.ins]
        if op.prim == "broadcast_in_dim":
            dims = op.params["broadcast_dimensions"]
            got = ins[0].reshape([ins[0].shape[dims.index(j)] if j in dims else 1 for j in range(len(x.shape))])
        elif op.prim in ir.ELEMENTWISE and all(i.shape == x.shape for i in op.ins if i.shape):
            common = np.broadcast_shapes(*(i.shape for i in ins))
            got = op.bind.bind(*(jnp.broadcast_to(i, common) for i in ins), **op.params)
        else:
            got = op.bind.bind(*(full(i, g) for i, g in zip(op.ins, ins)), **op.params)
        done[id(x)] = got
        return got

    return value
