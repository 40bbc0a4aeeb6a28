"""A task from a Python callable plus input shapes (what ``mk.optimize(fn, shapes)`` takes).

Shapes, for one scale, are any of:

* a list/tuple with one item per positional input; an item is a
  ``jax.ShapeDtypeStruct``, an array (only ``.shape`` and ``.dtype`` are read),
  a ``(shape, dtype)`` pair, an :class:`~mk.task.ArgSpec`, or a **pytree**
  (dicts, lists, tuples, nested) of those for an input that is a pytree of arrays;
* a dict ``parameter name -> one of those``: inputs bound by name (keyword-only
  parameters included); a dict whose keys are not all parameter names is read
  as distinct input names given in call order (one array each);
* a single struct, array or ``(shape, dtype)`` pair for a one-input function.

To give a function that takes one dict input its shapes, wrap the dict in a
list: ``shapes=[{"w": ..., "b": ...}]``.

The task's inputs are the **leaves**, named by their key paths
(``params.w``, ``params.layers.0``); its reference is then a flat wrapper
(``reference(*leaves, **static)``) that rebuilds the trees, calls ``fn`` and
returns the output leaves (one array, or a tuple). A function whose inputs and
outputs are already flat keeps ``fn`` itself as the reference. The
:class:`CallSpec` returned by :func:`callable_task` maps calls of ``fn`` onto
the task's flat inputs and back (``mk.optimize`` binds every call with it).

Static (non-array) arguments are declared by name, ``static_argnames`` as in
``jax.jit``, with their values for the optimisation in ``static`` (a dict; a
list gives values for the parameters after the inputs, in order); a declared
static without a value takes the function's default. Positional shapes skip
the static parameters, so ``f(x, temperature, b)`` takes ``shapes=[x, b]``.

``scales={"full": shapes, "ci": small_shapes}`` gives several named sizes (a
value may also be ``{"shapes": ..., "static": {...}}`` to override statics, or
a :class:`~mk.task.Scale`); every scale must have the same input structure.
Callables have no input generator, so floating inputs default to N(0, 1) and
integer/bool inputs to uniform integers in ``[0, d)`` where ``d`` is the
smallest dimension of any input over all scales (at least 2), so they are
valid indices into any axis; pass ``inits`` (by leaf name) to say better.
Without ``atol``/``rtol`` the dtype defaults of
:func:`mk.loaders.common.default_tolerance` apply.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mk.errors import TaskError
from mk.loaders import common
from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance, dtype_name

log = logging.getLogger(__name__)

KIND = "callable"
_Arg = tuple[str | None, tuple[int, ...], str, Init | None]  # name, shape, dtype, init

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True, eq=False)
class CallSpec:
    """How a call of the user's function maps onto a callable task's flat inputs, and back.

    ``params`` are the parameters that hold array inputs (signature order), ``in_tree`` the tree structure of
    their values (a tuple, one item per parameter), ``names``/``ranks``/``dtypes`` describe the leaves (the
    task's inputs, in order). ``static_names`` are the static arguments (the task's statics, in order) and
    ``static_values`` their values for the optimisation. ``flat``: the task's reference is the flat wrapper
    (``reference(*leaves, **static)``), not ``fn`` itself. ``positional``: ``fn`` has no usable signature
    (or its inputs were named freely), so inputs and statics bind by position."""

    fn: Callable[..., Any]
    signature: inspect.Signature | None
    params: tuple[str, ...]
    in_tree: Any
    names: tuple[str, ...]
    ranks: tuple[int, ...]
    dtypes: tuple[str, ...]
    static_names: tuple[str, ...]
    static_values: Mapping[str, Any]
    static_as_kwargs: bool
    flat: bool
    positional: bool

    # --- the task's (flat) calling convention ----------------------------------------------------
    def call(self, flat_fn: Callable[..., Any], leaves: Sequence[Any], static: Mapping[str, Any]) -> Any:
        """Call ``flat_fn`` (the task's reference or a kernel) the way the judge does: leaves, then statics."""
        if self.static_as_kwargs:
            return flat_fn(*leaves, **{n: static[n] for n in self.static_names})
        return flat_fn(*leaves, *(static[n] for n in self.static_names))

    def user_arguments(self, leaves: Sequence[Any], static: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` calling ``fn`` on these leaves and statics (the trees rebuilt)."""
        import jax

        values = jax.tree_util.tree_unflatten(self.in_tree, list(leaves))
        if self.positional or self.signature is None:
            if self.static_as_kwargs:
                return tuple(values), {n: static[n] for n in self.static_names}
            return tuple(values) + tuple(static[n] for n in self.static_names), {}
        given = dict(zip(self.params, values))
        varkw = _var(self.signature, _P.VAR_KEYWORD)
        for n in self.static_names:
            if n in self.signature.parameters or varkw is None:
                given[n] = static[n]
            else:  # a static taken by **kwargs
                given[varkw] = {**given.get(varkw, {}), n: static[n]}
        ordered = {p: given[p] for p in self.signature.parameters if p in given}
        bound = inspect.BoundArguments(self.signature, ordered)  # type: ignore[arg-type]
        return tuple(bound.args), dict(bound.kwargs)

    # --- a caller's call -------------------------------------------------------------------------
    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> "Bound":
        """Bind a call of ``fn`` as Python would; TypeError when Python would refuse it.

        A static argument the call leaves out takes the function's default, or, without one, its value from the
        optimisation. The result says which parameters hold arrays (``params``) and their values (``values``)."""
        statics: dict[str, Any] = {}
        filled: list[str] = []
        if self.positional or self.signature is None:
            n = len(self.params)
            unknown = sorted(set(kwargs) - set(self.static_names))
            if unknown:
                raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                                f"inputs are positional here, statics: {list(self.static_names) or 'none'}")
            if len(args) < n:
                raise TypeError(f"{n} input(s) expected ({', '.join(self.names)}), {len(args)} given")
            rest = list(args[n:])
            if len(rest) > len(self.static_names):
                raise TypeError(f"{len(args)} positional arguments given, {n + len(self.static_names)} at most "
                                f"({n} input(s) and the statics {list(self.static_names)})")
            for name in self.static_names:
                if rest:
                    statics[name] = rest.pop(0)
                elif name in kwargs:
                    statics[name] = kwargs[name]
                else:
                    statics[name] = self.static_values[name]
                    filled.append(name)
            ref_args, ref_kwargs = tuple(args), dict(kwargs)
            for name in filled:
                if self.static_as_kwargs or kwargs:
                    ref_kwargs[name] = statics[name]
                else:
                    ref_args += (statics[name],)
            return Bound(tuple(self.params), tuple(args[:n]), statics, ref_args, ref_kwargs, tuple(filled))
        sig = self.signature
        bound = sig.bind_partial(*args, **kwargs)
        arguments = dict(bound.arguments)
        varkw = _var(sig, _P.VAR_KEYWORD)
        for name in self.static_names:
            if name in arguments:
                statics[name] = arguments[name]
            elif name not in sig.parameters and varkw is not None and name in arguments.get(varkw, {}):
                statics[name] = arguments[varkw][name]
            elif name in sig.parameters and sig.parameters[name].default is not _P.empty:
                statics[name] = sig.parameters[name].default
            else:
                statics[name] = self.static_values[name]
                filled.append(name)
                if name in sig.parameters or varkw is None:
                    arguments[name] = statics[name]
                else:
                    arguments[varkw] = {**arguments.get(varkw, {}), name: statics[name]}
        missing = [p.name for p in sig.parameters.values()
                   if p.name not in arguments and p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)]
        if missing:
            raise TypeError(f"missing required argument(s) {', '.join(map(repr, missing))}")
        dyn = {p: v for p, v in arguments.items() if p not in self.static_names}
        if varkw in dyn:
            rest = {k: v for k, v in dyn[varkw].items() if k not in self.static_names}
            dyn = {p: v for p, v in dyn.items() if p != varkw}
            if rest:
                dyn[varkw] = rest
        ordered = {p: arguments[p] for p in sig.parameters if p in arguments}
        call = inspect.BoundArguments(sig, ordered)  # type: ignore[arg-type]
        return Bound(tuple(dyn), tuple(dyn.values()), statics, tuple(call.args), dict(call.kwargs), tuple(filled))


@dataclass(frozen=True)
class Bound:
    """One bound call: the array-holding parameters and their values, the statics, and the same call of ``fn``
    (``ref_args``/``ref_kwargs``, with statics the call left out filled in; ``filled`` names those)."""

    params: tuple[str, ...]
    values: tuple[Any, ...]
    static: dict[str, Any]
    ref_args: tuple[Any, ...]
    ref_kwargs: dict[str, Any]
    filled: tuple[str, ...] = ()


def flat_outputs(out: Any) -> Any:
    """The outputs of ``fn`` as the flat task returns them: one array, or a tuple of arrays (tree order)."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(out)
    if tree.num_leaves == 1 and tree.num_nodes == 1:
        return leaves[0]
    if type(out) is tuple and len(out) == len(leaves) and all(_is_array_leaf(o) for o in out):
        return out
    return tuple(leaves)


def _is_array_leaf(x: Any) -> bool:
    import jax

    t = jax.tree_util.tree_structure(x)
    return t.num_leaves == 1 and t.num_nodes == 1


def task_from_callable(
    fn: Callable[..., Any],
    shapes: Any = None,
    *,
    static: Mapping[str, Any] | Sequence[Any] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    static_as_kwargs: bool = False,
    atol: float | Sequence[float] | None = None,
    rtol: float | Sequence[float] | None = None,
    name: str | None = None,
    scales: Mapping[str, Any] | None = None,
    inits: Mapping[str, Any] | None = None,
    description: str = "",
    check: bool = True,
) -> Task:
    """Build a :class:`Task` for ``fn`` at ``shapes`` (see the module doc for the forms shapes and statics take).

    A flat function is called ``fn(*inputs, *static)`` (or ``**static`` with ``static_as_kwargs``); one with
    pytree or keyword inputs, or pytree outputs, gets a flat wrapper as its reference. ``check`` traces ``fn``
    once per scale with ``jax.eval_shape`` (no allocation) so wrong shapes fail here, not later."""
    return callable_task(fn, shapes, static=static, static_argnames=static_argnames, static_as_kwargs=static_as_kwargs,
                         atol=atol, rtol=rtol, name=name, scales=scales, inits=inits, description=description, check=check)[0]


def callable_task(
    fn: Callable[..., Any],
    shapes: Any = None,
    *,
    static: Mapping[str, Any] | Sequence[Any] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    static_as_kwargs: bool = False,
    atol: float | Sequence[float] | None = None,
    rtol: float | Sequence[float] | None = None,
    name: str | None = None,
    scales: Mapping[str, Any] | None = None,
    inits: Mapping[str, Any] | None = None,
    description: str = "",
    check: bool = True,
    computation_key: bool = False,
) -> tuple[Task, CallSpec]:
    """:func:`task_from_callable`, plus the :class:`CallSpec` that maps calls of ``fn`` onto the task.

    ``computation_key`` (what ``mk.optimize`` sets) always gives the task the flat wrapper as its reference,
    its identity holding :func:`computation_hash`: the task fingerprint, and with it the judge's cached
    reference outputs, then change when a global or closed-over value of ``fn`` does, not only when its
    source text does. A function that cannot be traced abstractly gets a fresh identity each time."""
    if not callable(fn):
        raise TaskError(f"expected a callable reference, got {type(fn).__name__}")
    specs = dict(scales or {})
    if shapes is not None:
        if "full" in specs:
            raise TaskError("both `shapes` and scales['full'] were given", hint="pass the full-size shapes once")
        specs = {"full": shapes, **specs}
    if not specs:
        raise TaskError("no input shapes given", hint="pass shapes=[jax.ShapeDtypeStruct(...), ...] or scales={'full': ...}")
    default = "full" if "full" in specs else next(iter(specs))
    if isinstance(specs[default], Scale):
        raise TaskError(f"scale {default!r} must list input shapes and dtypes, not be a bare Scale")

    sig = _signature(fn)
    declared = _declared_statics(fn, sig, static, static_argnames)
    base = _layout(fn, sig, default, specs[default], declared)
    scale_objs: dict[str, Scale] = {}
    all_shapes = [a[1] for a in base.leaves]
    for sname, value in specs.items():
        if isinstance(value, Scale):
            scale_objs[sname] = value
            continue
        lay = base if sname == default else _layout(fn, sig, sname, value, declared)
        if sname != default and (lay.params != base.params or lay.tree != base.tree or lay.names != base.names):
            raise TaskError(f"scale {sname!r} has inputs {list(lay.names)}, scale {default!r} has {list(base.names)}",
                            hint="every scale must give the same inputs, in the same structure")
        if [a[2] for a in lay.leaves] != [a[2] for a in base.leaves]:
            raise TaskError(f"scale {sname!r} has dtypes {[a[2] for a in lay.leaves]}, scale {default!r} has "
                            f"{[a[2] for a in base.leaves]}", hint="every scale must use the same input dtypes")
        all_shapes += [a[1] for a in lay.leaves]
        scale_objs[sname] = Scale(sname, shapes=tuple(a[1] for a in lay.leaves), static=dict(lay.overrides))

    statics = _statics(fn, sig, static, declared, base)
    names = list(base.names)
    args = _arg_specs(base.leaves, names, all_shapes, inits or {})
    spec = CallSpec(fn=fn, signature=None if base.positional else sig, params=base.params, in_tree=base.tree,
                    names=tuple(names), ranks=tuple(len(a[1]) for a in base.leaves), dtypes=tuple(a[2] for a in base.leaves),
                    static_names=tuple(s.name for s in statics), static_values={s.name: s.value for s in statics},
                    static_as_kwargs=static_as_kwargs, flat=False, positional=base.positional or sig is None)
    flat = computation_key or not _flat_inputs(spec, base) or not _flat_output(spec, args, scale_objs[default], statics)
    if flat:
        spec = dataclasses.replace(spec, flat=True, static_as_kwargs=True)
    elif statics and not spec.static_as_kwargs and not spec.positional and not _statics_follow(spec):
        spec = dataclasses.replace(spec, static_as_kwargs=True)  # fn(*inputs, *static) would bind them wrongly
    default_tol = _default_tolerance(spec, args, scale_objs[default], statics)
    tolerance = Tolerance(
        atol=common.parse_tol(atol, "atol", None) if atol is not None else default_tol.atol,
        rtol=common.parse_tol(rtol, "rtol", None) if rtol is not None else default_tol.rtol,
    )
    source, locator = _where(fn)
    task = Task(
        name=name or getattr(_unwrap(fn), "__name__", "task"),
        reference=_flat_reference(spec, computation_hash(spec, args, scale_objs) if computation_key else None) if spec.flat else fn,
        args=args,
        scales=scale_objs,
        static=statics,
        tolerance=tolerance,
        description=description or (inspect.getdoc(_unwrap(fn)) or "").split("\n\n")[0],
        source=source,
        kind=KIND,
        static_as_kwargs=spec.static_as_kwargs,
        default_scale=default,
        locator=locator,
    )
    if check:
        _check(task)
    return task, spec


# --- reading the shapes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    params: tuple[str, ...]  # the parameters holding inputs (signature order), or input labels when positional
    tree: Any  # tree structure of the tuple of their values
    leaves: list[_Arg]
    names: tuple[str, ...]
    overrides: Mapping[str, Any]
    positional: bool  # bind by position: no signature, or inputs named freely


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _var(sig: inspect.Signature | None, kind: Any) -> str | None:
    if sig is None:
        return None
    return next((p.name for p in sig.parameters.values() if p.kind is kind), None)


def _is_leaf(x: Any) -> bool:
    try:
        return _one(x) is not None
    except TaskError:
        return True  # a symbolic ArgSpec: _one says why when the leaf is read


def _layout(fn: Callable[..., Any], sig: inspect.Signature | None, sname: str, value: Any, static_names: Sequence[str]) -> _Layout:
    """Bind one scale's shapes to ``fn``'s parameters and flatten them into named leaves."""
    overrides: Mapping[str, Any] = {}
    if isinstance(value, Mapping) and "shapes" in value and not (sig is not None and "shapes" in sig.parameters):
        overrides = value.get("static") or {}
        value = value["shapes"]
    named = {p.name for p in sig.parameters.values() if p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)} if sig else set()
    pos: list[Any]
    kw: dict[str, Any] = {}
    if _is_leaf(value):
        pos = [value]
    elif isinstance(value, Mapping):
        keys = [str(k) for k in value]
        if sig is not None and keys and set(keys) <= named:
            kw = {str(k): v for k, v in value.items()}
            pos = []
        else:  # distinct input names, given in call order
            return _free_names(fn, sname, value, overrides)
    elif isinstance(value, (list, tuple)):
        pos = list(value)
        given = [a[0] for a in (_one(v) if _is_leaf(v) else None for v in pos) if a is not None]
        if pos and len(given) == len(pos) and all(given):  # named ArgSpecs: bound by name when they name parameters
            if len(set(given)) != len(given):
                raise TaskError(f"duplicate input names {given}")
            if sig is not None and set(given) <= named:
                kw, pos = dict(zip(given, pos)), []
            elif sig is None or not set(given) <= named:
                return _free_names(fn, sname, dict(zip(given, pos)), overrides)
    else:
        raise TaskError(f"scale {sname!r}: cannot read input shapes from {type(value).__name__}", hint=_SHAPE_HINT)
    bad = sorted(set(kw) & set(static_names))
    if bad:
        raise TaskError(f"scale {sname!r}: {', '.join(map(repr, bad))} is declared static; give its value in `static`, "
                        "not its shape")
    if sig is None:
        items = [(i, f"arg{i}", v) for i, v in enumerate(pos)]
        return _flatten(sname, items, [f"arg{i}" for i in range(len(pos))], overrides, positional=True)
    arguments: dict[str, Any] = {}
    labels: dict[str, Any] = {}
    slots = [p for p in sig.parameters.values() if p.kind in _POSITIONAL]
    i = 0
    for p in slots:
        if i >= len(pos):
            break
        if p.name in static_names:
            continue
        if p.name in kw:
            raise TaskError(f"scale {sname!r}: input {p.name!r} is given both by position and by name")
        arguments[p.name], labels[p.name] = pos[i], i
        i += 1
    if i < len(pos):
        var = _var(sig, _P.VAR_POSITIONAL)
        if var is None:
            takes = [p.name for p in slots if p.name not in static_names]
            raise TaskError(f"scale {sname!r}: {len(pos)} positional inputs given, {_fn_name(fn)} takes {len(takes)} "
                            f"({', '.join(takes) or 'none'}{'; static: ' + ', '.join(static_names) if static_names else ''})",
                            hint="give one shape (or pytree of shapes) per array parameter; static values go in `static`")
        arguments[var] = tuple(pos[i:])
        labels[var] = i
    for k, v in kw.items():
        arguments[k], labels[k] = v, repr(k)
    params = [p for p in sig.parameters if p in arguments]
    items = []
    for p in params:
        if sig.parameters[p].kind is _P.VAR_POSITIONAL:
            items += [(labels[p] + j, f"arg{labels[p] + j}", v) for j, v in enumerate(arguments[p])]
        else:
            items.append((labels[p], p, arguments[p]))
    return _flatten(sname, items, params, overrides, positional=False, sig=sig, arguments=arguments)


def _free_names(fn: Callable[..., Any], sname: str, value: Mapping[str, Any], overrides: Mapping[str, Any]) -> _Layout:
    """Inputs named by the caller (not by ``fn``'s parameters), one array each, passed in the given order."""
    items = []
    for key, item in value.items():
        if not _is_leaf(item):
            raise TaskError(f"scale {sname!r}: cannot read a shape and dtype for input {key!r} from {item!r}",
                            hint=_SHAPE_HINT + "; a dict of pytrees must be keyed by the function's parameter names")
        items.append((repr(str(key)), str(key), item))
    return _flatten(sname, items, [str(k) for k in value], overrides, positional=True)


def _flatten(sname: str, items: list[tuple[Any, str, Any]], params: Sequence[str], overrides: Mapping[str, Any], *,
             positional: bool, sig: inspect.Signature | None = None, arguments: Mapping[str, Any] | None = None) -> _Layout:
    import jax

    leaves: list[_Arg] = []
    for label, prefix, item in items:
        flat = jax.tree_util.tree_flatten_with_path(item, is_leaf=lambda x: _is_leaf(x) or (bool(x) and _is_shape(x)))[0]
        found = isinstance(item, Mapping) or any(_is_leaf(leaf) for _, leaf in flat)  # else a bare shape: say the item
        for path, leaf in flat:
            arg = _one(leaf) if _is_leaf(leaf) else None
            if arg is None:
                if isinstance(leaf, (bool, int, float, complex)) and not path:
                    raise TaskError(f"scale {sname!r}: input {prefix!r} is the Python {type(leaf).__name__} {leaf!r}, "
                                    "not a shape", hint=f"a 0-d input is (( ), 'float32'); a value that is not an array "
                                    f"goes in static={{{prefix!r}: {leaf!r}}} (static_argnames=({prefix!r},))")
                where = f"input {label}" if not found else f"input {_leaf_name(prefix, path)!r}"
                what = item if not found else leaf
                raise TaskError(f"scale {sname!r}: cannot read a shape and dtype for {where} from {what!r}", hint=_SHAPE_HINT)
            leaves.append((_leaf_name(prefix, path), arg[1], arg[2], arg[3]))
    names = tuple(a[0] or "" for a in leaves)
    if len(set(names)) != len(names):
        raise TaskError(f"duplicate input names {list(names)}")
    if positional:
        values: tuple[Any, ...] = tuple(item for _, _, item in items)
    else:
        assert arguments is not None
        values = tuple(arguments[p] for p in params)
    tree = jax.tree_util.tree_structure(values, is_leaf=_is_leaf)
    return _Layout(tuple(params), tree, leaves, names, overrides, positional)


def _leaf_name(prefix: str, path: Sequence[Any]) -> str:
    import jax

    return prefix if not path else f"{prefix}.{jax.tree_util.keystr(tuple(path), simple=True, separator='.')}"


def _fn_name(fn: Callable[..., Any]) -> str:
    return f"{getattr(_unwrap(fn), '__name__', 'the function')}()"


# --- statics ----------------------------------------------------------------------------------------
def _declared_statics(fn: Callable[..., Any], sig: inspect.Signature | None, static: Any, static_argnames: Any) -> tuple[str, ...]:
    """The statics named up front (``static_argnames``, or the keys of a ``static`` dict)."""
    if static is not None and not isinstance(static, Mapping) and (isinstance(static, (str, bytes)) or not isinstance(static, Sequence)):
        raise TaskError(f"`static` must be a dict or a list of values, got {type(static).__name__}")
    if static_argnames is None:
        names = tuple(str(k) for k in static) if isinstance(static, Mapping) else ()
    else:
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise TaskError(f"`static_argnames` must be distinct parameter names, got {static_argnames!r}")
        if isinstance(static, Mapping):
            extra = sorted(set(map(str, static)) - set(names))
            if extra:
                raise TaskError(f"`static` gives {', '.join(map(repr, extra))}, which `static_argnames` does not declare",
                                hint=f"add {', '.join(map(repr, extra))} to static_argnames, or leave static_argnames out")
    if sig is not None and names and _var(sig, _P.VAR_KEYWORD) is None:
        unknown = [n for n in names if n not in sig.parameters]
        if unknown:
            raise TaskError(f"static argument(s) {', '.join(map(repr, unknown))} are not parameters of {_fn_name(fn)}",
                            hint=f"its parameters: {', '.join(sig.parameters)}")
    return names


def _statics(fn: Callable[..., Any], sig: inspect.Signature | None, static: Any, declared: tuple[str, ...], base: _Layout) -> tuple[StaticArg, ...]:
    if declared:
        values = dict(static) if isinstance(static, Mapping) else {}
        if static is not None and not isinstance(static, Mapping):
            if len(static) != len(declared):
                raise TaskError(f"`static` lists {len(static)} value(s) for the {len(declared)} static_argnames {list(declared)}")
            values = dict(zip(declared, static))
        out = []
        for n in declared:
            if n in values:
                out.append(StaticArg(n, values[n]))
            elif sig is not None and n in sig.parameters and sig.parameters[n].default is not _P.empty:
                out.append(StaticArg(n, sig.parameters[n].default))
            else:
                raise TaskError(f"static argument {n!r} has no value to optimise for",
                                hint=f"give it: static={{{n!r}: ...}}")
        if sig is not None and not base.positional:  # signature order, so a positional call binds them right
            order = list(sig.parameters)
            out.sort(key=lambda s: order.index(s.name) if s.name in order else len(order))
        return tuple(out)
    if static is None:
        return ()
    # a list of values: the parameters after the inputs, in order
    if sig is None or base.positional:
        params, _ = common.param_names(fn)
        rest = params[len(base.leaves):]
    else:
        rest = [p.name for p in sig.parameters.values() if p.kind in _POSITIONAL and p.name not in base.params]
    return tuple(StaticArg(rest[i] if i < len(rest) else f"static{i}", v) for i, v in enumerate(static))


# --- flat or wrapped ----------------------------------------------------------------------------------
def _flat_inputs(spec: CallSpec, base: _Layout) -> bool:
    """True when ``fn(*leaves, ...)`` is the call: one array per parameter, in the leading positional slots."""
    if spec.positional or spec.signature is None:
        return base.tree.num_leaves == len(base.params) == base.tree.num_nodes - 1
    sig = spec.signature
    slots = [p.name for p in sig.parameters.values() if p.kind in _POSITIONAL]
    if list(spec.params) != slots[:len(spec.params)]:
        return False
    return base.tree.num_leaves == len(spec.params) and base.tree.num_nodes == len(spec.params) + 1


def _statics_follow(spec: CallSpec) -> bool:
    """True when ``fn(*leaves, *static)`` binds each static to its own parameter."""
    if spec.signature is None:
        return True
    slots = [p.name for p in spec.signature.parameters.values() if p.kind in _POSITIONAL]
    n = len(spec.params)
    return list(spec.static_names) == slots[n:n + len(spec.static_names)]


def _flat_output(spec: CallSpec, args: Sequence[ArgSpec], scale: Scale, statics: Sequence[StaticArg]) -> bool:
    """True when ``fn`` returns one array or a tuple of arrays (what the judge's flat output is)."""
    import jax

    from mk.task import np_dtype

    shapes = scale.shapes or ()
    structs = [jax.ShapeDtypeStruct(tuple(s), np_dtype(a.dtype)) for a, s in zip(args, shapes)]
    values = {s.name: scale.static.get(s.name, s.value) for s in statics}
    try:
        out = jax.eval_shape(lambda *leaves: spec.fn(*spec.user_arguments(leaves, values)[0],
                                                     **spec.user_arguments(leaves, values)[1]), *structs)
    except Exception:  # noqa: BLE001 - _check reports a reference that cannot be traced
        return True
    return flat_outputs(out) is out


def _default_tolerance(spec: CallSpec, args: Sequence[ArgSpec], scale: Scale, statics: Sequence[StaticArg]
                       ) -> Tolerance:
    """The dtype default (:func:`mk.loaders.common.default_tolerance`) of the inputs and each output: an output in a
    narrower float than the inputs (float32 in, bfloat16 out) is compared at its own precision, one tolerance per
    output where they differ."""
    import jax

    from mk.task import np_dtype

    inputs = [a.dtype for a in args]
    structs = [jax.ShapeDtypeStruct(tuple(s), np_dtype(a.dtype)) for a, s in zip(args, scale.shapes or ())]
    values = {s.name: scale.static.get(s.name, s.value) for s in statics}
    try:
        out = jax.eval_shape(lambda *leaves: spec.fn(*spec.user_arguments(leaves, values)[0],
                                                     **spec.user_arguments(leaves, values)[1]), *structs)
    except Exception:  # noqa: BLE001 - _check reports a reference that cannot be traced
        return common.default_tolerance(inputs)
    outs = [dtype_name(leaf.dtype) for leaf in jax.tree_util.tree_leaves(out)]
    tols = [common.default_tolerance(inputs + [o]) for o in outs] or [common.default_tolerance(inputs)]
    if all((t.atol, t.rtol) == (tols[0].atol, tols[0].rtol) for t in tols):
        return tols[0]
    return Tolerance(atol=tuple(float(t.atol) for t in tols), rtol=tuple(float(t.rtol) for t in tols))


def computation_hash(spec: CallSpec, args: Sequence[ArgSpec], scales: Mapping[str, Scale]) -> str | None:
    """A hash of what ``fn`` computes: its jaxpr at every scale's shapes and statics, with its constants' bytes
    (so a changed global or closed-over value changes it, a renamed variable does not); None when ``fn``
    cannot be traced abstractly."""
    import hashlib
    import re

    import jax

    from mk.task import np_dtype

    digest = hashlib.sha256()
    for sname in sorted(scales):
        scale = scales[sname]
        if scale.shapes is None:
            return None
        structs = [jax.ShapeDtypeStruct(tuple(sh), np_dtype(a.dtype)) for a, sh in zip(args, scale.shapes)]
        static = {n: scale.static.get(n, v) for n, v in spec.static_values.items()}

        def call(*leaves: Any, static: Mapping[str, Any] = static) -> Any:
            a, kw = spec.user_arguments(leaves, static)
            return spec.fn(*a, **kw)

        try:
            closed = jax.make_jaxpr(call)(*structs)
        except Exception as exc:  # noqa: BLE001 - any failure to trace means "no computation hash"
            log.info("%s cannot be traced abstractly at scale %s (%s)", _fn_name(spec.fn), sname, type(exc).__name__)
            return None
        digest.update(sname.encode())
        digest.update(re.sub(r"0x[0-9a-fA-F]{6,}", "0x", str(closed.jaxpr)).encode())
        for c in closed.consts:
            a = np.asarray(c)
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def _flat_reference(spec: CallSpec, computation: str | None) -> Callable[..., Any]:
    """``reference(*leaves, **static)``: rebuild the trees, call ``fn``, return its output leaves.

    Its source (what ``inspect.getsource`` says: an LM author reads it, and the task fingerprint hashes it) is
    a short function whose comments say how the leaves map onto ``fn``'s arguments and quote ``fn``'s own
    source, and, with ``computation``, that hash (so the fingerprint follows what ``fn`` computes)."""
    import linecache
    import textwrap
    import uuid

    fn = spec.fn
    base = getattr(_unwrap(fn), "__name__", "reference")
    ident = base if base.isidentifier() and base not in ("_mk_flat_call",) else "reference"
    try:
        original = textwrap.dedent(inspect.getsource(_unwrap(fn))).rstrip("\n")
    except (OSError, TypeError):
        original = repr(fn)
    static = f"; statics by keyword: {', '.join(spec.static_names)}" if spec.static_names else ""
    lines = [f"def {ident}(*inputs, **static):",
             f"    # mk: the flat form of the reference {base}"
             + (f" (computation {computation[:16]})" if computation else "") + ".",
             f"    # inputs, in order: {', '.join(spec.names) or 'none'}{static}.",
             f"    # It rebuilds {base}'s arguments ({', '.join(spec.params) or 'none'}) from them, calls it and returns",
             "    # its output leaves: one array, or a tuple. The reference:",
             *[f"    #   {line}".rstrip() for line in original.splitlines()],
             "    return _mk_flat_call(inputs, static)", ""]
    text = "\n".join(lines)
    filename = f"<mk reference {base} {computation[:16] if computation else uuid.uuid4().hex[:16]}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)

    def call(leaves: tuple[Any, ...], static: dict[str, Any]) -> Any:
        args, kwargs = spec.user_arguments(leaves, static)
        return flat_outputs(fn(*args, **kwargs))

    namespace: dict[str, Any] = {"_mk_flat_call": call, "__name__": getattr(fn, "__module__", None) or __name__}
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - our own text
    reference = namespace[ident]
    reference.__doc__ = inspect.getdoc(_unwrap(fn))
    reference.__qualname__ = f"{getattr(_unwrap(fn), '__qualname__', base)}.<mk flat>"
    params, seen = [], set(spec.static_names)
    for i, n in enumerate(spec.names):
        name = n.replace(".", "_")
        name = name if name.isidentifier() and name not in seen else f"input{i}"
        seen.add(name)
        params.append(_P(name, _P.POSITIONAL_ONLY))
    params += [_P(n, _P.KEYWORD_ONLY) for n in spec.static_names if n.isidentifier()]
    reference.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return reference


_SHAPE_HINT = "give a jax.ShapeDtypeStruct, an array, or a (shape, dtype) pair such as ((1024, 512), 'float32')"


def _one(item: Any) -> _Arg | None:
    """One input's (name, shape, dtype, init), or None when ``item`` is not one input."""
    if isinstance(item, ArgSpec):
        if any(isinstance(d, str) for d in item.shape):
            raise TaskError(f"input {item.name!r} has symbolic dims {item.shape}; give concrete shapes per scale")
        return item.name, tuple(int(d) for d in item.shape), item.dtype, item.init
    if hasattr(item, "shape") and hasattr(item, "dtype") and not isinstance(item, type):
        return None, tuple(int(d) for d in item.shape), dtype_name(item.dtype), None
    if isinstance(item, (list, tuple)) and len(item) == 2 and _is_shape(item[0]) and _is_dtype(item[1]):
        return None, tuple(int(d) for d in item[0]), dtype_name(item[1]), None
    return None


def _is_shape(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in x)


def _is_dtype(x: Any) -> bool:
    if isinstance(x, (list, tuple, int, float)) or x is None:
        return False
    try:
        np.dtype(x)
        return True
    except TypeError:
        return False


def _arg_specs(base: list[_Arg], names: list[str], all_shapes: list[tuple[int, ...]], inits: Mapping[str, Any]) -> tuple[ArgSpec, ...]:
    unknown = set(inits) - set(names)
    if unknown:
        raise TaskError(f"`inits` names unknown inputs {sorted(unknown)}; inputs are {names}")
    dims = [d for s in all_shapes for d in s if d > 0]
    int_high = max(2, min(dims)) if dims else 2
    out = []
    for (_, shape, dtype, init), nm in zip(base, names):
        if nm in inits:
            init = Init.parse(inits[nm], dtype)
        elif init is None:
            if common.is_floating(dtype):
                init = Init("normal")
            else:
                # within the dtype's range (an int8 input of a 256-wide task drew 255: OverflowError, issue 25's set)
                top = int(np.iinfo(np.dtype(dtype)).max) + 1 if dtype != "bool" else 2
                init = Init("randint", low=0, high=2 if dtype == "bool" else min(int_high, top))
        if init.kind == "native":
            raise TaskError(f"input {nm!r}: a callable task has no input generator, so 'native' init is impossible",
                            hint="use randint/uniform/normal, or write an mk task module with its own generator")
        out.append(ArgSpec(nm, shape, dtype, init))
    return tuple(out)


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.unwrap(fn) if callable(fn) else fn


def _where(fn: Callable[..., Any]) -> tuple[Path | None, dict[str, str]]:
    base = _unwrap(fn)
    try:
        file = inspect.getsourcefile(base)
    except TypeError:
        file = None
    ident = f"{getattr(base, '__module__', '?')}:{getattr(base, '__qualname__', repr(base))}"
    return (Path(file) if file else None), common.locator(KIND, file or "", ident)


def _check(task: Task) -> None:
    import jax

    for sname in task.scales:
        try:
            outs = task.output_structs(sname)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerIntegerConversionError) as exc:
            log.warning("task %r cannot be traced abstractly (%s); shapes were not checked", task.name, type(exc).__name__)
            return
        except TaskError:
            raise
        except Exception as exc:
            raise TaskError(f"task {task.name!r}: calling the reference with scale {sname!r} shapes "
                            f"{task.shapes(sname)} fails: {type(exc).__name__}: {common.first_line(exc)}",
                            hint="check the shapes, dtypes and static arguments") from exc
        n = len(jax.tree_util.tree_leaves(outs))
        for key, tol in (("atol", task.tolerance.atol), ("rtol", task.tolerance.rtol)):
            if isinstance(tol, tuple) and len(tol) != n:
                raise TaskError(f"task {task.name!r}: `{key}` lists {len(tol)} tolerances but the reference returns {n} output(s)",
                                hint=f"give one number, or exactly {n} numbers")
