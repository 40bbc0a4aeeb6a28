"""Helpers shared by the task loaders: safe file import, shape tracing, defaults.

Nothing here allocates a task's inputs: shapes come from :func:`jax.eval_shape`
of the task's own generator, which traces it abstractly.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import logging
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np

from mk.errors import TaskError
from mk.task import ArgSpec, Init, Tolerance, dtype_name, np_dtype

log = logging.getLogger(__name__)

#: Default tolerances by the least precise floating input dtype (bits -> (atol, rtol)).
#: Used when a task states none: 8-bit floats 1e-1, 16-bit 2e-2/1e-2, fp32 1e-4, fp64 1e-7.
_DEFAULT_TOL = {8: (1e-1, 1e-1), 16: (2e-2, 1e-2), 32: (1e-4, 1e-4), 64: (1e-7, 1e-7)}


def import_file(path: Path, kind: str) -> ModuleType:
    """Import ``path`` under a unique module name, with its folder on ``sys.path``
    only while it executes. Helper modules it imported from its folder are
    dropped from ``sys.modules`` afterwards, so tasks with same-named helpers
    never collide (helpers imported lazily inside functions will not be found)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise TaskError("file not found", path=path, hint="check the path")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_mk_task_{kind}_{stem}_{digest}"
    try:
        source = path.read_text(encoding="utf-8")
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise TaskError(
            f"syntax error at line {exc.lineno}: {exc.msg}",
            path=path,
            hint="fix the Python syntax in this file",
            line=exc.lineno,
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read the file: {exc}", path=path) from exc
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:  # pragma: no cover - only for paths importlib refuses outright
        raise TaskError("cannot import this file as a Python module", path=path)
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    before = set(sys.modules)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise TaskError(
            f"importing the task module failed: {type(exc).__name__}: {exc}{_user_frame(exc, path)}",
            path=path,
            hint="run `python " + str(path) + "` to see the full traceback",
        ) from exc
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
        if added:  # new top-level helpers found through the temporary path entry go too
            known = {m.split(".")[0] for m in before}
            for mod_name in set(sys.modules) - before - {name}:
                mod_file = getattr(sys.modules[mod_name], "__file__", None) or ""
                if mod_name.split(".")[0] not in known and mod_file and path.parent in Path(mod_file).resolve().parents:
                    del sys.modules[mod_name]
    return module


def _user_frame(exc: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path]
    return f" (line {frames[-1].lineno})" if frames else ""


def require_function(module: ModuleType, name: str, path: Path, what: str) -> Callable[..., Any]:
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        raise TaskError(f"no function `{name}` defined", path=path, hint=f"define `def {name}(...)`: {what}")
    return fn


def trace_generator(gen: Callable[[], Any], split: Callable[[Any], tuple[Sequence[Any], Any]], path: Path, what: str) -> tuple[list[Any], Any]:
    """Shapes of a generator's dynamic outputs without allocating them.

    ``split(out) -> (dynamic, static)`` validates the generator's return value;
    static values are captured through a closure because ``eval_shape`` can only
    return arrays. Returns ``(list of ShapeDtypeStruct, static)``."""
    import jax

    box: dict[str, Any] = {}

    def dynamic_only() -> tuple[Any, ...]:
        dynamic, static = split(gen())
        box["static"] = static
        return tuple(dynamic)

    try:
        structs = jax.eval_shape(dynamic_only)
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(
            f"could not trace {what} to read input shapes without allocating them: {type(exc).__name__}: {first_line(exc)}",
            path=path,
            hint="build inputs with jax.random / jnp and avoid Python control flow on array values in the generator",
        ) from exc
    out = []
    for i, s in enumerate(structs):
        if not hasattr(s, "shape") or not hasattr(s, "dtype"):
            raise TaskError(f"{what} returned a non-array dynamic input at position {i} ({type(s).__name__})", path=path,
                            hint="dynamic inputs must be a flat sequence of arrays")
        out.append(s)
    static = box.get("static")
    _check_static(static, path, what)
    return out, static


def _check_static(static: Any, path: Path, what: str) -> None:
    import jax

    values = static.values() if isinstance(static, dict) else (static or ())
    for i, v in enumerate(values):
        if isinstance(v, jax.core.Tracer):
            raise TaskError(f"{what} returned a JAX array as static argument {i}", path=path,
                            hint="static arguments must be Python values (int, float, str, tuple); move arrays to the dynamic inputs")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


def is_floating(dtype: str) -> bool:
    return np.issubdtype(np_dtype(dtype), np.floating) or "float" in dtype


def default_init(dtype: str) -> Init:
    """Floating inputs: an assumed N(0, 1); anything else comes from the task's generator."""
    return Init("normal") if is_floating(dtype) else Init("native")


def arg_specs(structs: Sequence[Any], names: Sequence[str]) -> tuple[ArgSpec, ...]:
    specs = []
    for s, n in zip(structs, names):
        dt = dtype_name(s.dtype)
        specs.append(ArgSpec(name=n, shape=tuple(int(d) for d in s.shape), dtype=dt, init=default_init(dt)))
    return tuple(specs)


def param_names(fn: Callable[..., Any]) -> tuple[list[str], bool]:
    """Positional parameter names of ``fn`` and whether it takes ``*args``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [], True
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, any(p.kind is p.VAR_POSITIONAL for p in params)


def input_names(fn: Callable[..., Any], n: int, prefix: str = "arg") -> list[str]:
    names, _ = param_names(fn)
    return [names[i] if i < len(names) else f"{prefix}{i}" for i in range(n)]


def default_tolerance(dtypes: Sequence[str]) -> Tolerance:
    bits = [np_dtype(d).itemsize * 8 for d in dtypes if is_floating(d)]
    atol, rtol = _DEFAULT_TOL.get(min(bits) if bits else 32, _DEFAULT_TOL[32])
    return Tolerance(atol=atol, rtol=rtol)


def parse_tol(value: Any, key: str, path: Path | None) -> float | tuple[float, ...]:
    """One number, or a per-output list of numbers."""
    try:
        if isinstance(value, (list, tuple)):
            if not value:
                raise ValueError("empty list")
            return tuple(float(v) for v in value)
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TaskError(f"`{key}` must be a number or a list of numbers, got {value!r}", path=path) from exc


def check_tolerance_outputs(tol: Tolerance, reference: Callable[..., Any], structs: Sequence[Any], static: Sequence[Any] | dict,
                            path: Path | None) -> None:
    """A per-output tolerance list must have one entry per output (checked by ``eval_shape``)."""
    lengths = {k: len(v) for k, v in (("atol", tol.atol), ("rtol", tol.rtol)) if isinstance(v, tuple)}
    if not lengths:
        return
    import jax

    if isinstance(static, dict):
        fn = lambda *dyn: reference(*dyn, **static)  # noqa: E731
    else:
        fn = lambda *dyn: reference(*dyn, *static)  # noqa: E731
    try:
        outs = jax.eval_shape(fn, *structs)
    except Exception as exc:  # a reference that cannot be traced: cannot count outputs here
        log.warning("%s: cannot count the reference's outputs to check per-output tolerances (%s)", path, first_line(exc))
        return
    n = len(jax.tree_util.tree_leaves(outs))
    for key, length in lengths.items():
        if length != n:
            raise TaskError(f"`{key}` lists {length} tolerances but the reference returns {n} output(s)", path=path,
                            hint=f"give one number, or exactly {n} numbers")


def locator(kind: str, path: Path | str, task_id: str) -> dict[str, str]:
    return {"kind": kind, "path": str(path), "id": task_id}


def doc_summary(module: ModuleType) -> str:
    doc = inspect.getdoc(module) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def host_inputs(dynamic: Sequence[Any], specs: Sequence[ArgSpec], path: Path | None) -> list[np.ndarray]:
    """The generator's real arrays as host arrays of the spec's dtypes."""
    if len(dynamic) != len(specs):
        raise TaskError(f"the input generator returned {len(dynamic)} inputs, the task spec has {len(specs)}", path=path)
    out = []
    for x, spec in zip(dynamic, specs):
        arr = np.asarray(x)
        want = np_dtype(spec.dtype)
        out.append(arr if arr.dtype == want else arr.astype(want))
    return out


def native_generator(draw: Any, seeded: bool) -> Any:
    """``draw(scale, seed)`` as a task's ``native_inputs``: taking the case's seed when the task's own generator
    takes one (``seeded``), else the one-argument form (every case then draws seed 0's arrays)."""
    if seeded:
        def native_inputs(scale: str, seed: int) -> Any:
            return draw(scale, seed)
    else:
        def native_inputs(scale: str) -> Any:  # type: ignore[misc]
            return draw(scale, 0)
    return native_inputs
