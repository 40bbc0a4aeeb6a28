"""Turn (part of) a jaxpr back into plain ``jnp``/``lax`` Python source.

The offline author uses this to put the reference's own computation inside a
Pallas kernel body, where it runs on *blocks* rather than whole arrays. The
emitted code is therefore written "row-agnostic": each value's leading *row*
axes (the ones a kernel tiles over) are collapsed into one physical axis, axes
are addressed from the right, and broadcasts rely on numpy-style right
alignment instead of fixed shapes. Anything that cannot be expressed that way
raises :class:`Unsupported` with the reason, so the author can decline.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

log = logging.getLogger(__name__)


class Unsupported(Exception):
    """This jaxpr cannot be emitted as block-local code; the message says why."""


_UNARY = {
    "neg": "-{0}", "exp": "jnp.exp({0})", "exp2": "jnp.exp2({0})", "log": "jnp.log({0})", "log1p": "jnp.log1p({0})",
    "expm1": "jnp.expm1({0})", "tanh": "jnp.tanh({0})", "logistic": "jax.nn.sigmoid({0})", "sqrt": "jnp.sqrt({0})",
    "rsqrt": "lax.rsqrt({0})", "cbrt": "jnp.cbrt({0})", "abs": "jnp.abs({0})", "sign": "jnp.sign({0})",
    "floor": "jnp.floor({0})", "ceil": "jnp.ceil({0})", "erf": "lax.erf({0})", "erfc": "lax.erfc({0})",
    "erf_inv": "lax.erf_inv({0})", "sin": "jnp.sin({0})", "cos": "jnp.cos({0})", "tan": "jnp.tan({0})",
    "not": "~{0}", "is_finite": "jnp.isfinite({0})", "square": "({0} * {0})", "stop_gradient": "{0}",
    "copy": "{0}", "copy_p": "{0}", "optimization_barrier": "{0}", "real": "{0}", "round": "jnp.round({0})",
    "softplus": "jax.nn.softplus({0})",
}
_BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})", "max": "jnp.maximum({0}, {1})",
    "min": "jnp.minimum({0}, {1})", "pow": "jnp.power({0}, {1})", "atan2": "jnp.arctan2({0}, {1})", "rem": "lax.rem({0}, {1})",
    "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})", "eq": "({0} == {1})", "ne": "({0} != {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})", "add_any": "({0} + {1})",
    "nextafter": "jnp.nextafter({0}, {1})",
}
_REDUCE = {"reduce_sum": "jnp.sum", "reduce_max": "jnp.max", "reduce_min": "jnp.min", "reduce_prod": "jnp.prod",
           "reduce_and": "jnp.all", "reduce_or": "jnp.any", "argmax": "jnp.argmax", "argmin": "jnp.argmin"}
_INLINE = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "checkpoint")


@dataclass
class Emitted:
    """Source lines computing ``outputs`` from ``inputs`` (names in the lines)."""

    lines: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    primitives: set[str] = field(default_factory=set)


def dtype_expr(dtype: Any) -> str:
    return f"jnp.{np.dtype(dtype).name}"


#: what a padded entry becomes before a reduction over its axis, so it changes nothing
_FILL = {"reduce_sum": "0", "reduce_max": "'low'", "reduce_min": "'high'", "reduce_prod": "1", "reduce_and": "True",
         "reduce_or": "False", "argmax": "'low'", "argmin": "'high'"}

#: the helper a kernel with padded blocks defines (see ``Emitter(mask=True)``)
#: a block body's unary forms where kernels differ from plain JAX: neither Mosaic nor Triton lowers erf or erfc (exact
#: GELU is x * erfc(-x / sqrt 2) / 2), so a kernel computes them with :data:`ERF_HELPER` (erfc as 1 - erf: exact to
#: the float's absolute rounding; a tiny erfc(x) for x > 4 becomes 0)
_KERNEL_UNARY = {**_UNARY, "erf": "_erf({0})", "erfc": "(1.0 - _erf({0}))"}

ERF_HELPER = '''def _erf(x):
    """erf in float32 by a rational approximation (Eigen's; within 4e-7 of the exact value): neither Mosaic nor
    Triton lowers lax.erf."""
    xf = jnp.clip(x.astype(jnp.float32), -4.0, 4.0)
    x2 = xf * xf
    p = x2 * -2.72614225801306e-10 + 2.77068142495902e-08
    p = x2 * p + -2.10102402082508e-06
    p = x2 * p + -5.69250639462346e-05
    p = x2 * p + -7.34990630326855e-04
    p = x2 * p + -2.95459980854025e-03
    p = x2 * p + -1.60960333262415e-02
    q = x2 * -1.45660718464996e-05 + -2.13374055278905e-04
    q = x2 * q + -1.68282697438203e-03
    q = x2 * q + -7.37332916720468e-03
    q = x2 * q + -1.42647390514189e-02
    return (xf * p / q).astype(x.dtype)'''


def exact_form(prim: str, params: Mapping[str, Any], out_dtype: Any, ins: Sequence[str]) -> str | None:
    """The source of the primitives whose table form would change their meaning, else None: ``round`` by its
    ``rounding_method`` (``lax.round``'s default rounds halves away from zero, ``jnp.round`` to even: a kernel that
    rounded 2.5 to 2 was judged correct, stop 39's red team) and ``div`` of integers (``lax.div`` truncates; ``/`` is
    true division)."""
    if prim == "round":
        method = params.get("rounding_method")
        if int(getattr(method, "value", method or 0)) == 1:  # TO_NEAREST_EVEN
            return f"jnp.round({ins[0]})"
        a = f"jnp.abs({ins[0]})"
        return f"(jnp.where({a} - jnp.floor({a}) >= 0.5, jnp.ceil({a}), jnp.floor({a})) * jnp.sign({ins[0]}))"
    if prim == "div" and np.issubdtype(np.dtype(out_dtype), np.integer):
        return f"lax.div({ins[0]}, {ins[1]})"
    return None


def body_helpers(*bodies: Emitted | None) -> list[str]:
    """The helper functions the emitted ``bodies`` call (:data:`MASKED_HELPER`, :data:`ERF_HELPER`), each followed by
    two blank lines, for the written file."""
    prims = set().union(*(b.primitives for b in bodies if b is not None))
    out: list[str] = []
    if "_masked" in prims:
        out += [*MASKED_HELPER.splitlines(), "", ""]
    if prims & {"erf", "erfc"}:
        out += [*ERF_HELPER.splitlines(), "", ""]
    return out


MASKED_HELPER = '''def _masked(x, axis, n, fill):
    """x with its entries at or past n along axis (block padding) set to fill, so a reduction ignores them."""
    if x.shape[axis] == n:
        return x
    if fill in ("low", "high"):
        if jnp.issubdtype(x.dtype, jnp.floating):
            fill = -jnp.inf if fill == "low" else jnp.inf
        else:
            fill = jnp.iinfo(x.dtype).min if fill == "low" else jnp.iinfo(x.dtype).max
    keep = lax.broadcasted_iota(jnp.int32, x.shape, axis % x.ndim) < n
    return jnp.where(keep, x, jnp.asarray(fill, x.dtype))
'''


class Emitter:
    """Emit eqns of a jaxpr; ``lead`` is the number of row axes (collapsed).

    ``probes`` (:class:`mk.author.probe.Probes`) turns literals and reshape sizes that follow the inputs' sizes or
    static values into expressions over them. ``mask``: the block's trailing axes may be padded (to a power of
    two, for Triton): every reduction first sets the padding to the reduction's identity (``_masked``), and
    reshapes that move data between axes are refused."""

    def __init__(self, lead: int, probes: Any = None, mask: bool = False, taken: Any = (), may_split: bool = False):
        self.lead = lead
        #: ``may_split`` (with ``mask``): the row's one trailing axis may be split into groups by a reshape; ``split``
        #: then records (its size, the number of groups, the group size), as source, for the kernel's padding
        self.may_split = may_split
        self.split: tuple[str, str, str] | None = None
        self._reduced: list[str] = []
        self._taken = set(taken)
        self.probes = probes
        self.mask = mask
        self.out = Emitted()
        self._names: dict[Any, str] = {}
        self._rowlead: dict[str, int] = {}  # name -> number of row axes it carries (lead or 0)
        self._scalars: set[str] = set()  # size-1 values held as 0-d numbers
        self._n = 0

    # --- names ---------------------------------------------------------------
    def bind(self, var: Any, name: str, row: bool, scalar: bool = False) -> None:
        """``scalar``: a parameter of size 1 that the kernel holds as a plain number (0-d), whatever its rank."""
        self._names[var] = name
        self._rowlead[name] = self.lead if row else 0
        if scalar:
            self._scalars.add(name)

    def _fresh(self) -> str:
        self._n += 1
        while f"v{self._n}" in self._taken:
            self._n += 1
        return f"v{self._n}"

    def _ref(self, atom: Any) -> tuple[str, int]:
        from jax._src.core import Literal

        if isinstance(atom, Literal):
            val = np.asarray(atom.val)
            dt = dtype_expr(atom.aval.dtype)
            if val.shape != ():
                raise Unsupported("a non-scalar constant is baked into the computation")
            expr = self.probes.literal_expr(atom) if self.probes is not None else None
            if expr is not None:
                return f"jnp.asarray({expr}, {dt})", 0
            item = val.item()
            text = repr(item) if not isinstance(item, float) or np.isfinite(item) else f'float("{item}")'
            return f"jnp.asarray({text}, {dt})", 0
        if atom not in self._names:
            raise Unsupported("the computation closes over an array constant")
        name = self._names[atom]
        return name, self._rowlead[name]

    def _set(self, var: Any, expr: str, lead: int) -> None:
        name = self._fresh()
        self.out.lines.append(f"{name} = {expr}")
        self._names[var] = name
        self._rowlead[name] = lead

    def _sizes(self, eqn: Any, shape_of: Any) -> list[str]:
        """Per axis of ``shape_of(eqn)``: its size as source (a number, or an expression over the variables)."""
        shapes = [tuple(shape_of(e)) for e in (self.probes.peers(eqn) if self.probes is not None else [eqn])]
        out = []
        for k in range(len(shapes[0])):
            if self.probes is None:
                out.append(str(shapes[0][k]))
                continue
            try:
                out.append(self.probes.dim([s[k] for s in shapes]))
            except ValueError as exc:
                raise Unsupported(str(exc)) from exc
        return out

    # --- eqns -----------------------------------------------------------------
    def emit(self, eqns: list[Any]) -> None:
        for eqn in eqns:
            self._eqn(eqn)

    def _eqn(self, eqn: Any) -> None:
        prim = eqn.primitive.name
        self.out.primitives.add(prim)
        ins = [self._ref(a) for a in eqn.invars]
        lead = max((l for _, l in ins), default=0)
        p = eqn.params
        if prim in _INLINE:
            self._inline(eqn, ins)
            return
        if (prim in ("reshape", "squeeze", "expand_dims", "broadcast_in_dim", "convert_element_type") or prim in _REDUCE
                and prim not in ("argmax", "argmin")) and ins and ins[0][0] in self._scalars \
                and math.prod(eqn.outvars[0].aval.shape) == 1:
            # a number stays a number: its size-1 axes come and go by broadcasting
            name = ins[0][0] if prim != "convert_element_type" else f"{ins[0][0]}.astype({dtype_expr(p['new_dtype'])})"
            if prim == "convert_element_type":
                self._set(eqn.outvars[0], name, 0)
                self._scalars.add(self._names[eqn.outvars[0]])
            else:
                self._names[eqn.outvars[0]] = name
            return
        if len(eqn.outvars) != 1:
            raise Unsupported(f"primitive {prim!r} with several outputs is not supported in a block body")
        out = eqn.outvars[0]
        rank = len(out.aval.shape)
        exact = exact_form(prim, p, out.aval.dtype, [n for n, _ in ins])
        if exact is not None:
            self._set(out, exact, lead)
        elif prim in _KERNEL_UNARY:
            self._set(out, _KERNEL_UNARY[prim].format(ins[0][0]), lead)
        elif prim in _BINARY:
            self._set(out, _BINARY[prim].format(ins[0][0], ins[1][0]), lead)
        elif prim == "integer_pow":
            self._set(out, f"lax.integer_pow({ins[0][0]}, {int(p['y'])})", lead)
        elif prim == "convert_element_type":
            self._set(out, f"{ins[0][0]}.astype({dtype_expr(p['new_dtype'])})", lead)
        elif prim == "select_n":
            if len(ins) == 3:  # select_n(pred, on_false, on_true), broadcasting like jnp.where
                self._set(out, f"jnp.where({ins[0][0]}, {ins[2][0]}, {ins[1][0]})", lead)
            else:
                self._set(out, f"lax.select_n({', '.join(n for n, _ in ins)})", lead)
        elif prim == "clamp":
            self._set(out, f"jnp.clip({ins[1][0]}, {ins[0][0]}, {ins[2][0]})", lead)
        elif prim == "reduce_precision":
            self._set(out, f"lax.reduce_precision({ins[0][0]}, {p['exponent_bits']}, {p['mantissa_bits']})", lead)
        elif prim in _REDUCE:
            self._reduce(eqn, prim, ins[0])
        elif prim == "broadcast_in_dim":
            self._broadcast(eqn, ins[0])
        elif prim in ("reshape", "squeeze", "expand_dims"):
            self._reshape(eqn, ins[0])
        elif prim == "transpose":
            perm = tuple(p["permutation"])
            name, l = ins[0]
            if tuple(perm[:l]) != tuple(range(l)):
                raise Unsupported("a transpose moves the row axes")
            phys = ((0,) + tuple(q - l + 1 for q in perm[l:])) if l else perm
            self._set(out, f"jnp.transpose({name}, {phys!r})", l)
        elif prim == "dot_general":
            raise Unsupported("a matrix product inside the row-wise part")
        else:
            raise Unsupported(f"primitive {prim!r} has no block-local form in mk's emitter")
        del rank

    def _inline(self, eqn: Any, ins: list[tuple[str, int]]) -> None:
        p = eqn.params
        sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
        if sub is None:
            raise Unsupported(f"cannot inline {eqn.primitive.name!r}")
        closed = getattr(sub, "jaxpr", sub)
        if getattr(sub, "consts", None):
            raise Unsupported("a nested function closes over constants")
        for v, (name, l) in zip(closed.invars, ins):
            self._names[v] = name
            self._rowlead[name] = l
        self.emit(closed.eqns)
        for outer, inner in zip(eqn.outvars, closed.outvars):
            name, l = self._ref(inner)
            self._names[outer] = name
            self._rowlead[name] = l

    def _reduce(self, eqn: Any, prim: str, arg: tuple[str, int]) -> None:
        name, l = arg
        rank = len(eqn.invars[0].aval.shape)
        axes = tuple(eqn.params["axes"]) if "axes" in eqn.params else (eqn.params["axis"],)
        if any(a < l for a in axes):
            raise Unsupported("a reduction runs across rows (over the axes a kernel would tile)")
        neg = tuple(a - rank for a in axes)
        if self.mask:
            sizes = self._sizes(eqn, lambda e: e.invars[0].aval.shape)
            for a, n in zip(axes, neg):
                name = f"_masked({name}, {n}, {sizes[a]}, {_FILL[prim]})"
                self._reduced.append(sizes[a])
            self.out.primitives.add("_masked")
        fn = _REDUCE[prim]
        if prim in ("argmax", "argmin"):
            expr = f"{fn}({name}, axis={neg[0]}).astype({dtype_expr(eqn.params['index_dtype'])})"
        else:
            expr = f"{fn}({name}, axis={neg!r})"
        self._set(eqn.outvars[0], expr, l)

    def _broadcast(self, eqn: Any, arg: tuple[str, int]) -> None:
        name, l = arg
        if name in self._scalars:  # a number broadcasts by itself
            self._set(eqn.outvars[0], name, 0)
            return
        dims = tuple(eqn.params["broadcast_dimensions"])
        rank = len(eqn.params["shape"])
        L = self.lead
        if l:  # a row value: its row axes must stay in front
            if dims[:l] != tuple(range(l)):
                raise Unsupported("a broadcast moves the row axes")
            mapped = dims
            start = L
        else:  # a parameter: axes it puts on row positions must be size 1
            src_shape = eqn.invars[0].aval.shape
            if any(src_shape[j] != 1 for j, d in enumerate(dims) if d < L):
                raise Unsupported("a parameter is broadcast along the row axes")
            on_rows = [j for j, d in enumerate(dims) if d < L]
            if on_rows:
                name = f"{name}[{', '.join('0' if j in on_rows else ':' for j in range(len(dims)))}]"
            mapped = tuple(d for d in dims if d >= L)
            start = min(mapped, default=rank)
        idx = [":" if k in mapped else "None" for k in range(start, rank)]
        expr = f"{name}[..., {', '.join(idx)}]" if "None" in idx else name
        self._set(eqn.outvars[0], expr, l)

    def _reshape(self, eqn: Any, arg: tuple[str, int]) -> None:
        name, l = arg
        src = tuple(eqn.invars[0].aval.shape)
        dst = tuple(eqn.outvars[0].aval.shape)
        if l and src[:l] != dst[:l]:
            raise Unsupported("a reshape changes the row axes")
        if not l and self.lead and len(dst) >= self.lead and any(d != 1 for d in dst[: self.lead]) and len(dst) > len(src):
            raise Unsupported("a reshape of a parameter creates row axes")
        a_src = self._sizes(eqn, lambda e: e.invars[0].aval.shape)[l:]
        a_dst = self._sizes(eqn, lambda e: e.outvars[0].aval.shape)[l:]
        phys = 1 if l else 0  # the collapsed row axis comes first in a row value
        if [d for d in a_src if d != "1"] == [d for d in a_dst if d != "1"]:
            # only axes of size 1 come or go: keep the value's own sizes (right for any size, padded or not)
            it = iter(k for k, d in enumerate(a_src) if d != "1")
            parts = ["1" if d == "1" else f"{name}.shape[{phys + next(it)}]" for d in a_dst]
        elif self.mask and self.may_split and l and len(a_src) == 1 and len(a_dst) == 2 \
                and self.split in (None, (a_src[0], a_dst[0], a_dst[1])):
            # the row's one axis splits into (groups, group size): the kernel pads it group by group
            # (pad_groups), so the padded block splits into (_pow2(groups), _pow2(group size))
            self.split = (a_src[0], a_dst[0], a_dst[1])
            parts = [f"_pow2({a_dst[0]})", f"_pow2({a_dst[1]})"]
            self.out.primitives.add("_pow2")
        elif self.mask and self.split is not None and l and len(a_src) == 2 and tuple(a_src) == self.split[1:] \
                and len(a_dst) == 1:
            parts = [f"{name}.shape[1] * {name}.shape[2]"]
        elif self.mask:
            raise Unsupported("a reshape moves data between axes of a block that may be padded (Triton needs "
                              "power-of-two blocks)")
        else:
            parts = a_dst
        tail = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        if l:
            self._set(eqn.outvars[0], f"{name}.reshape({name}.shape[:1] + {tail})", l)
        else:
            self._set(eqn.outvars[0], f"{name}.reshape({tail})", 0)

    def result(self, outvars: list[Any]) -> Emitted:
        if self.split is not None and self.split[0] in self._reduced:
            raise Unsupported("a reduction runs over a whole row that is also split into groups: padded group by "
                              "group, its padding is not at the row's end")
        self.out.outputs = [self._ref(v)[0] for v in outvars]
        return self.out


# --- the written kernel file -------------------------------------------------------------------------
def file_head(title: str, text: str, *, gpu: bool, space: Any, imports: Sequence[str] = ()) -> list[str]:
    """The first lines of a written kernel file: its docstring (``title`` and ``text`` wrapped), the imports every
    Pallas kernel file needs (``imports`` after ``functools``), the Triton or Mosaic module, and ``CONFIG_SPACE``."""
    import textwrap

    return [f'"""{title}', "", *textwrap.wrap(text, 110), '"""',
            "import functools", *imports, "", "import jax", "import jax.numpy as jnp", "from jax import lax",
            "from jax.experimental import pallas as pl",
            "from jax.experimental.pallas import triton as pltriton" if gpu else "from jax.experimental.pallas import tpu as pltpu",
            "", f"CONFIG_SPACE = {space!r}"]


def module_body(module: Any) -> str:
    """A kernel module's code after its docstring and imports (the written file has its own imports)."""
    import inspect

    lines = inspect.getsource(module).splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith(("import ", "from ")))
    return "\n".join(lines[last + 1:]).strip("\n")


def kernel_path(module: Any) -> str:
    """Where a kernel module's code lives, as a written file names it: ``mk/kernels/<family>/<file>.py``."""
    return module.__name__.replace(".", "/") + ".py"


def language_stem(target: str) -> str:
    """The stem of ``target``'s kernel-language files in a family folder (``tpu`` for Mosaic, ``gpu`` for Triton):
    by the target's kernel language, so a registered target names the files it really copies in."""
    from mk.targets import kernel_language

    return {"mosaic": "tpu", "triton": "gpu"}[kernel_language(target)]


def family_section(module: Any) -> list[str]:
    """A kernel module (``mk/kernels/<family>/<file>.py``) copied unchanged into a written file, between two rules."""
    return [f"# --- {kernel_path(module)} ".ljust(99, "-"), module_body(module), "# " + "-" * 100]
