"""A task from a Python callable plus input shapes (what ``mk.optimize(fn, shapes)`` takes).

Shapes, for one scale, are any of:

* a list/tuple whose items are each a ``jax.ShapeDtypeStruct``, an array
  (only ``.shape`` and ``.dtype`` are read), a ``(shape, dtype)`` pair or an
  :class:`~mk.task.ArgSpec`;
* a dict ``name -> one of those`` (names must be the callable's parameters,
  or at least distinct);
* a single struct, array or ``(shape, dtype)`` pair for a one-input function.

``scales={"full": shapes, "ci": small_shapes}`` gives several named sizes (a
value may also be ``{"shapes": ..., "static": {...}}`` to override statics, or
a :class:`~mk.task.Scale`). Callables have no input generator, so floating
inputs default to N(0, 1) and integer/bool inputs to uniform integers in
``[0, d)`` where ``d`` is the smallest dimension of any input over all scales
(at least 2), so they are valid indices into any axis; pass ``inits`` to say
better. Without ``atol``/``rtol`` the dtype defaults of
:func:`mk.loaders.common.default_tolerance` apply.
"""

from __future__ import annotations

import functools
import inspect
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mk.errors import TaskError
from mk.loaders import common
from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance, dtype_name

log = logging.getLogger(__name__)

KIND = "callable"
_Arg = tuple[str | None, tuple[int, ...], str, Init | None]  # name, shape, dtype, init


def task_from_callable(
    fn: Callable[..., Any],
    shapes: Any = None,
    *,
    static: Mapping[str, Any] | Sequence[Any] | None = None,
    static_as_kwargs: bool = False,
    atol: float | Sequence[float] | None = None,
    rtol: float | Sequence[float] | None = None,
    name: str | None = None,
    scales: Mapping[str, Any] | None = None,
    inits: Mapping[str, Any] | None = None,
    description: str = "",
    check: bool = True,
) -> Task:
    """Build a :class:`Task` for ``fn(*inputs, *static)`` (or ``**static`` with
    ``static_as_kwargs``). ``check`` traces ``fn`` once per scale with
    ``jax.eval_shape`` (no allocation) so wrong shapes fail here, not later."""
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

    base, base_static = _parse_scale(default, specs[default])
    names = _names(fn, base)
    base = _reorder(base, names)
    scale_objs: dict[str, Scale] = {}
    all_shapes = [a[1] for a in base]
    for sname, value in specs.items():
        if isinstance(value, Scale):
            scale_objs[sname] = value
            continue
        parsed, overrides = (base, base_static) if sname == default else _parse_scale(sname, value)
        parsed = _reorder(parsed, names)
        if [a[2] for a in parsed] != [a[2] for a in base]:
            raise TaskError(f"scale {sname!r} has dtypes {[a[2] for a in parsed]}, scale {default!r} has {[a[2] for a in base]}",
                            hint="every scale must use the same input dtypes")
        all_shapes += [a[1] for a in parsed]
        scale_objs[sname] = Scale(sname, shapes=tuple(a[1] for a in parsed), static=dict(overrides))

    statics = _statics(fn, static, len(base))
    args = _arg_specs(base, names, all_shapes, inits or {})
    default_tol = common.default_tolerance([a.dtype for a in args])
    tolerance = Tolerance(
        atol=common.parse_tol(atol, "atol", None) if atol is not None else default_tol.atol,
        rtol=common.parse_tol(rtol, "rtol", None) if rtol is not None else default_tol.rtol,
    )
    source, locator = _where(fn)
    task = Task(
        name=name or getattr(_unwrap(fn), "__name__", "task"),
        reference=fn,
        args=args,
        scales=scale_objs,
        static=statics,
        tolerance=tolerance,
        description=description or (inspect.getdoc(_unwrap(fn)) or "").split("\n\n")[0],
        source=source,
        kind=KIND,
        static_as_kwargs=static_as_kwargs,
        default_scale=default,
        locator=locator,
    )
    if check:
        _check(task)
    return task


def _parse_scale(sname: str, value: Any) -> tuple[list[_Arg], Mapping[str, Any]]:
    overrides: Mapping[str, Any] = {}
    if isinstance(value, Mapping) and "shapes" in value:
        overrides = value.get("static") or {}
        value = value["shapes"]
    if _one(value) is not None:
        return [_one(value)], overrides  # a single input
    if isinstance(value, Mapping):
        out = []
        for key, item in value.items():
            arg = _one(item)
            if arg is None:
                raise TaskError(f"scale {sname!r}: cannot read a shape and dtype for input {key!r} from {item!r}", hint=_SHAPE_HINT)
            out.append((str(key), arg[1], arg[2], arg[3]))
        return out, overrides
    if isinstance(value, (list, tuple)):
        out = []
        for i, item in enumerate(value):
            arg = _one(item)
            if arg is None:
                raise TaskError(f"scale {sname!r}: cannot read a shape and dtype for input {i} from {item!r}", hint=_SHAPE_HINT)
            out.append(arg)
        return out, overrides
    raise TaskError(f"scale {sname!r}: cannot read input shapes from {type(value).__name__}", hint=_SHAPE_HINT)


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


def _names(fn: Callable[..., Any], base: list[_Arg]) -> list[str]:
    given = [a[0] for a in base]
    if all(given):
        if len(set(given)) != len(given):
            raise TaskError(f"duplicate input names {given}")
        params, _ = common.param_names(fn)
        if set(given) <= set(params):
            return sorted(given, key=params.index)  # call order is the signature's
        return [str(g) for g in given]
    return common.input_names(fn, len(base))


def _reorder(parsed: list[_Arg], names: list[str]) -> list[_Arg]:
    if not all(a[0] for a in parsed):
        return parsed
    by_name = {a[0]: a for a in parsed}
    if set(by_name) != set(names):
        raise TaskError(f"scales name different inputs: {sorted(by_name)} vs {sorted(names)}")
    return [by_name[n] for n in names]


def _statics(fn: Callable[..., Any], static: Mapping[str, Any] | Sequence[Any] | None, n_inputs: int) -> tuple[StaticArg, ...]:
    if static is None:
        return ()
    if isinstance(static, Mapping):
        return tuple(StaticArg(str(k), v) for k, v in static.items())
    if isinstance(static, (str, bytes)) or not isinstance(static, Sequence):
        raise TaskError(f"`static` must be a dict or a list of values, got {type(static).__name__}")
    params, _ = common.param_names(fn)
    rest = params[n_inputs:]
    return tuple(StaticArg(rest[i] if i < len(rest) else f"static{i}", v) for i, v in enumerate(static))


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
                init = Init("randint", low=0, high=2 if dtype == "bool" else int_high)
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
