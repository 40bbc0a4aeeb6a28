"""The lowering tables as they were before the candidate ran, and whether the candidate changed them.

The tracer lowers one traced program twice: for the device (the program the chip's compiler compiles) and, with its
kernels in interpret mode, for the CPU (the program the cases run). Both lowerings look their rules up in tables
candidate code can reach: JAX's (``mlir.register_lowering``, per platform or for all) and Pallas's per-backend
kernel tables (Mosaic TPU, Triton, Mosaic GPU). A rule registered or replaced in one of them makes the checked program
and the device program differ (an epilogue scaled by 1.01 on the TPU only; a copy kernel on the device while the
CPU's rule computes the task). :func:`snapshot` records every table entry, with the identity of the code behind it,
before the candidate is imported; :func:`changed` names the first entry that differs after the trace.

This is a tripwire in the tracer's own process, not the trust boundary: candidate code runs there and could change
what it does not look at (docs/judge.md, "The boundary", says what is and is not closed).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import sys
import types
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: (module, attribute, nesting): the tables a lowering looks rules up in. nesting 1: {primitive: rule}; 2: {platform
#: or core type: {primitive: rule}}. A Pallas module is recorded only if the target can lower through it.
TABLES = {
    "jax": [("jax._src.interpreters.mlir", "_lowerings", 1), ("jax._src.interpreters.mlir", "_platform_specific_lowerings", 2)],
    "mosaic": [("jax._src.pallas.mosaic.lowering", "lowering_rules", 2)],
    "triton": [("jax._src.pallas.triton.lowering", "triton_lowering_rules", 1),
               ("jax._src.pallas.mosaic_gpu.lowering", "mosaic_lowering_rules", 2)],
}


def _identity(rule: Any, depth: int = 0) -> tuple[Any, ...]:
    """What makes a rule behave as it does, as the objects themselves (held, so no id is reused; compared by
    identity): the rule, and for a function its code, defaults and closure cells' contents; for a partial (or a named
    tuple entry) what it wraps."""
    if depth > 3:
        return (rule,)
    if isinstance(rule, functools.partial):
        return (rule, _identity(rule.func, depth + 1), tuple(rule.args), tuple(sorted(rule.keywords.items())))
    if dataclasses.is_dataclass(rule) or (isinstance(rule, tuple) and hasattr(rule, "_fields")):  # mlir.LoweringRuleEntry
        values = [getattr(rule, f.name) for f in dataclasses.fields(rule)] if dataclasses.is_dataclass(rule) else list(rule)
        return (rule,) + tuple(_identity(v, depth + 1) if callable(v) else (v,) for v in values)
    code = getattr(rule, "__code__", None)
    if code is None:  # another callable: the object and its class's own __call__
        return (rule, type(rule), type(rule).__dict__.get("__call__"))
    cells = []
    for cell in rule.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(_EMPTY)
    return (rule, code, rule.__defaults__, rule.__kwdefaults__, tuple(cells))


_EMPTY = object()


def _same(a: Any, b: Any) -> bool:
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a is b


def _entries(table: Any, nesting: int) -> dict[Any, tuple[Any, ...]]:
    out: dict[Any, tuple[Any, ...]] = {}
    for key, value in list(table.items()):
        if nesting == 2:
            out.update({(key, k): v for k, v in _entries(value, 1).items()})
            out[(key, None)] = (value,)  # the inner dict itself replaced
        else:
            out[key] = _identity(value)
    return out


def snapshot(kernel_language: str | None) -> dict[str, Any]:
    """Every entry of the tables ``kernel_language``'s lowering uses ("mosaic", "triton" or None: JAX's only),
    importing the Pallas lowering modules first (0.1-0.3 s; importing one registers rules in JAX's tables too), so
    the candidate finds them already recorded."""
    tables = TABLES["jax"] + TABLES.get(kernel_language or "", [])
    modules = {}
    for module, _, _ in tables:
        try:
            modules[module] = importlib.import_module(module)
        except ImportError:  # a backend this JAX does not ship: nothing to record
            continue
        if module.startswith("jax._src.pallas."):  # the backend's other modules register rules when first imported
            _import_package(module.rsplit(".", 1)[0])
    snap: dict[str, Any] = {}
    for module, attr, nesting in tables:
        if module in modules:
            table = getattr(modules[module], attr)
            snap[f"{module}.{attr}"] = (modules[module], attr, nesting, table, _entries(table, nesting))
    return snap


def _import_package(package: str) -> None:
    """Import every module of a Pallas backend package (its lowering, primitives, pipeline and registration modules
    add rules to the tables when first imported, which would otherwise happen during the candidate's trace)."""
    import pkgutil

    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a module this machine cannot load (a missing toolkit): nothing it registers
            log.debug("not imported for the lowering snapshot: %s", info.name)


def _primitive(key: Any) -> Any:
    return key[1] if isinstance(key, tuple) and len(key) == 2 else key


def _from_library(rule: Any) -> bool:
    """Whether every piece of code a rule can run is in JAX's installed package (a module the candidate imported,
    e.g. an upstream op defining its own primitive), followed through what a rule carries (:func:`_code_objects`:
    closures, defaults, partials, wrapped functions, bound methods, callable objects, containers; round 12, a red
    team: a rule made by ``mlir.lower_fun`` is JAX's code around the candidate's function). A file name is the
    code's claim: a tripwire's check, not a proof."""
    return all(_in_jax(code.co_filename) for code in _code_objects(rule))


def _in_jax(file: str) -> bool:
    """Whether ``file`` is in JAX's installed packages (``jax``, ``jaxlib`` and their plugins)."""
    import jax

    return str(Path(file).resolve()).startswith(str(Path(jax.__file__).resolve().parent.parent) + "/jax")


def _jax_defines(prim: Any) -> bool:
    """Whether ``prim`` is a module-level name of a module in JAX's package (a primitive an upstream op or a lazily
    imported JAX module defines), not one the candidate made (round 12: a red team's primitives built from
    ``type(lax.neg_p)``, whose rules were JAX's code alone, rounded the TPU output to bf16)."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if (name == "jax" or name.startswith("jax.")) and file and _in_jax(file):
            if any(v is prim for v in list(vars(module).values())):
                return True
    return False


def _code_objects(value: Any, depth: int = 0, seen: set[int] | None = None) -> list[types.CodeType]:
    """The code objects reachable from ``value`` through the parts of a callable that decide what it runs (bounded
    depth; each object once)."""
    seen = set() if seen is None else seen
    if depth > 12 or id(value) in seen or value is None or isinstance(value, (str, bytes, int, float, bool, complex)):
        return []
    seen.add(id(value))
    found: list[types.CodeType] = []

    def more(*parts: Any) -> None:
        for part in parts:
            found.extend(_code_objects(part, depth + 1, seen))

    if isinstance(value, types.CodeType):
        return [value]
    if isinstance(value, types.ModuleType):
        return []  # a module is not run by being referenced; its functions are reached where they are held
    if isinstance(value, type):  # a class used as a rule runs its construction, an object its class's __call__,
        for klass in value.__mro__:  # inherited too (round 12: a red team's class and callable-object rules)
            for name in ("__new__", "__init__", "__call__"):
                attr = klass.__dict__.get(name)
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, types.FunctionType):  # Python code; a C slot is no one's to change
                    more(attr)
        return found
    if isinstance(value, (tuple, list, set, frozenset)):
        more(*value)
    elif isinstance(value, dict):
        more(*value.values())
    elif isinstance(value, functools.partial):
        more(value.func, *value.args, *value.keywords.values())
    elif isinstance(value, types.MethodType):
        more(value.__func__, value.__self__)
    elif isinstance(value, types.FunctionType):
        found.append(value.__code__)
        cells = []
        for cell in value.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        more(*cells, value.__defaults__, value.__kwdefaults__, getattr(value, "__wrapped__", None))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        more(*(getattr(value, f.name, None) for f in dataclasses.fields(value)))
    elif callable(value):  # a jitted function, a custom_jvp, an object with __call__: what it wraps and how it calls
        more(getattr(value, "__wrapped__", None), getattr(value, "fun", None), type(value),
             vars(value) if hasattr(value, "__dict__") else None)
    return found


def changed(snap: dict[str, Any]) -> str | None:
    """The first table entry the candidate added, removed or replaced since :func:`snapshot`, in words; None if none.
    A rule added for a primitive none of the tables knew before (one a library module the candidate imported
    defines, with its rules) is not a change, if its code is JAX's."""
    known = {_primitive(k) for (_, _, _, _, before) in snap.values() for k in before}
    for name, (mod, attr, nesting, table, before) in snap.items():
        if getattr(sys.modules.get(mod.__name__), attr, None) is not table:
            return f"{name} was replaced"
        after = _entries(table, nesting)
        for key in before.keys() | after.keys():
            if key not in before:
                prim = _primitive(key)
                if prim not in known and prim is not None and _jax_defines(prim) and _from_library(_raw(table, key, nesting)):
                    continue
                return f"a lowering rule was registered in {name} for {_name(key)}"
            if key not in after:
                return f"the lowering rule in {name} for {_name(key)} was removed"
            if not _same(before[key], after[key]):
                return f"the lowering rule in {name} for {_name(key)} was replaced or rewritten"
    return None


def _raw(table: Any, key: Any, nesting: int) -> Any:
    return table[key[0]][key[1]] if nesting == 2 else table[key]


def _name(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{_name(key[1])} (on {key[0]})" if key[1] is not None else f"every rule on {key[0]}"
    return str(getattr(key, "name", key))
