"""The built-in task suites: list them, load one, export them as MaxKernel task dirs.

A built-in suite is a folder of mk task modules shipped as package data
(``data/<suite>/<id>.py``, one task per file, the file name being the task id).
Ids are written ``<suite>:<id>`` (``jaxbench:12p_RMSNorm``); a bare ``<id>``
means the ``jaxbench`` suite.
"""

from __future__ import annotations

from typing import Any

import dataclasses
import difflib
import importlib.resources
import importlib.util
import logging
import re
import sys
from pathlib import Path
from types import ModuleType

from mk.errors import TaskError
from mk.task import Task

__all__ = ["SUITES", "DEFAULT_SUITE", "suite_dir", "list_builtin", "load_builtin", "builtin_path", "export_maxkernel"]

log = logging.getLogger(__name__)

DEFAULT_SUITE = "jaxbench"
#: suite name -> folder holding its task modules (inside the ``mk.data`` package).
SUITES: dict[str, Path] = {"jaxbench": Path(str(importlib.resources.files("mk.data") / "jaxbench"))}

_ID_RE = re.compile(r"^(\d+)[A-Za-z]*_")
_modules: dict[tuple[str, int], ModuleType] = {}


def suite_dir(suite: str = DEFAULT_SUITE) -> Path:
    """The folder of ``suite``'s task modules."""
    if suite not in SUITES:
        raise TaskError(f"unknown built-in suite {suite!r}", hint=f"use one of: {', '.join(SUITES)}")
    return SUITES[suite]


def _sort_key(task_id: str) -> tuple[int, str]:
    m = _ID_RE.match(task_id)
    return (int(m.group(1)) if m else sys.maxsize, task_id)


def _ids(suite: str) -> list[str]:
    folder = suite_dir(suite)
    if not folder.is_dir():
        return []
    ids = [p.stem for p in folder.glob("*.py") if not p.name.startswith("_")]
    return sorted(ids, key=_sort_key)


def list_builtin(suite: str = DEFAULT_SUITE) -> list[str]:
    """Task ids of ``suite`` as ``"<suite>:<id>"``, in the suite's numeric order."""
    return [f"{suite}:{i}" for i in _ids(suite)]


def _split(task_id: str) -> tuple[str, str]:
    suite, sep, name = task_id.partition(":")
    if not sep:
        return DEFAULT_SUITE, task_id.strip()
    return suite.strip(), name.strip()


def builtin_path(task_id: str) -> Path:
    """The module file of a built-in task; :class:`TaskError` with close matches if unknown."""
    suite, name = _split(task_id)
    folder = suite_dir(suite)
    path = folder / f"{name}.py"
    if name and not name.startswith("_") and "/" not in name and path.is_file():
        return path
    known = _ids(suite)
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.4)
    # A bare number prefix ("12p" or "12") is a common short form: offer those too.
    close += [i for i in known if i.split("_", 1)[0].rstrip("pk") == name.rstrip("pk") and i not in close]
    hint = f"did you mean: {', '.join(f'{suite}:{c}' for c in close)}" if close else "run `mk tasks jaxbench` to list the built-in tasks"
    raise TaskError(f"no built-in task {task_id!r} in suite {suite!r}", hint=hint)


def _load_module(path: Path, suite: str) -> ModuleType:
    key = (str(path), path.stat().st_mtime_ns)
    if key in _modules:
        return _modules[key]
    mod_name = "mk_builtin_" + re.sub(r"\W", "_", f"{suite}_{path.stem}")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise TaskError("cannot import the built-in task module", path=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken task file: report it as a task error
        sys.modules.pop(mod_name, None)
        raise TaskError(f"importing the task module failed: {type(exc).__name__}: {exc}", path=path) from exc
    _modules[key] = module
    return module


def load_builtin(task_id: str) -> Task:
    """Load ``"jaxbench:<id>"`` (or ``"<id>"``) as a :class:`Task` with its source and locator set."""
    suite, name = _split(task_id)
    path = builtin_path(task_id)
    module = _load_module(path, suite)
    task = getattr(module, "TASK", None)
    if not isinstance(task, Task):
        raise TaskError("the built-in task module defines no `TASK = Task(...)`", path=path)
    if task.name != name:
        raise TaskError(f"the module's task is named {task.name!r}, its file {name!r}; they must match", path=path)
    return dataclasses.replace(task, source=path, locator={"kind": "builtin", "id": f"{suite}:{name}"})


def export_maxkernel(dest_dir: str | Path, *, scale: str = "full", ids: list[str] | None = None) -> list[Path]:
    """Write one MaxKernel-format task dir per task (``dest/<id>/reference.py`` and
    ``kernel_task.yaml``) and return the dirs. ``ids`` defaults to the whole jaxbench suite."""
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for tid in ids if ids is not None else list_builtin():
        task = load_builtin(tid)
        out.append(_write_maxkernel_dir(task, dest / task.name, scale=scale))
        log.info("exported %s (scale %s) to %s", tid, scale, out[-1])
    return out


# --- MaxKernel export -------------------------------------------------------

_SHIM = """
class {name}:  # stand-in for mk.task.{name}: the exported file must not need mk
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __getattr__(self, attr):
        try:
            return self.__dict__["kwargs"][attr]
        except KeyError:
            raise AttributeError(attr) from None
"""

_ENTRY = """

# --- MaxKernel entry points, generated by mk from {locator} at scale {scale!r} ---
import numpy as _mk_np
import jax.numpy as _mk_jnp

_MK_SCALE = {scale!r}
_MK_SEED_SALT = {salt!r}
#: (name, shape, dtype, init kind, mean, std, low, high, value) per dynamic input
_MK_INPUTS = {inputs!r}
_MK_STATIC = {static!r}


def _mk_dtype(name):
    return _mk_np.dtype(getattr(_mk_jnp, name)) if hasattr(_mk_jnp, name) else _mk_np.dtype(name)


def _mk_sample(rng, shape, dtype, kind, mean, std, low, high, value):
    if kind == "normal":
        x = rng.standard_normal(shape, dtype=_mk_np.float32) * std + mean
    elif kind == "uniform":
        x = rng.uniform(low, high, size=shape).astype(_mk_np.float32)
    elif kind == "randint":
        x = rng.integers(int(low), int(high), size=shape)
    elif kind == "ones":
        x = _mk_np.ones(shape, _mk_np.float32)
    elif kind == "zeros":
        x = _mk_np.zeros(shape, _mk_np.float32)
    elif kind == "constant":
        x = _mk_np.full(shape, value, _mk_np.float32)
    else:
        raise ValueError("unknown init kind " + repr(kind))
    return _mk_np.asarray(x).astype(_mk_dtype(dtype))


def get_inputs(seed=0):
    \"\"\"(dynamic inputs, static arguments) for scale {scale!r}.\"\"\"
{draw}
    return dynamic, list(_MK_STATIC)


def computation(*args):
    \"\"\"The reference: computation(*dynamic, *static).\"\"\"
{call}
"""

_DRAW_NATIVE = """    dynamic = [_mk_np.asarray(x) for x in {fn}(_MK_SCALE)[0]]"""
_DRAW_NATIVE_SEEDED = """    dynamic = [_mk_np.asarray(x) for x in {fn}(_MK_SCALE, seed)[0]]"""
_DRAW_INIT = """    rng = _mk_np.random.default_rng(_mk_np.random.SeedSequence([seed, _MK_SEED_SALT]))
    dynamic = [_mk_sample(rng, tuple(shape), *rest) for _, shape, *rest in _MK_INPUTS]"""


def _module_level_name(fn: object, namespace: dict, what: str, path: Path | None) -> str:
    name = getattr(fn, "__name__", "")
    if not name or namespace.get(name) is not fn:
        raise TaskError(f"the task's {what} must be a module-level function to export it", path=path)
    return name


def _strip_mk(source: str, path: Path | None) -> str:
    """The module source without its ``mk`` imports and ``TASK`` assignment; names
    from ``mk`` still used elsewhere get inert stand-ins, so the file needs no mk."""
    import ast

    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: list[tuple[int, int]] = []
    mk_names: set[str] = set()
    for node in tree.body:
        is_mk_import = (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mk") or (
            isinstance(node, ast.Import) and any(a.name.split(".")[0] == "mk" for a in node.names)
        )
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if is_mk_import:
            mk_names.update((a.asname or a.name).split(".")[0] for a in node.names)
        if is_mk_import or any(isinstance(t, ast.Name) and t.id == "TASK" for t in targets):
            drop.append((node.lineno - 1, node.end_lineno or node.lineno))
    for start, end in reversed(drop):
        del lines[start:end]
    kept = "".join(lines)
    used = {n.id for n in ast.walk(ast.parse(kept)) if isinstance(n, ast.Name)} & mk_names
    if not used:
        return kept
    log.warning("%s: module-level code uses %s from mk; the export defines stand-ins", path, sorted(used))
    shims = "".join(_SHIM.format(name=n) for n in sorted(used))
    # after the docstring and any __future__ import, before the first use
    body = ast.parse(kept).body
    at = 0
    for i, node in enumerate(body):
        is_doc = i == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant)
        if is_doc or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            at = node.end_lineno or at
    kept_lines = kept.splitlines(keepends=True)
    return "".join(kept_lines[:at]) + shims + "".join(kept_lines[at:])


def _entry_points(task: Task, namespace: dict, scale: str) -> str:
    from mk.task import _stable_int  # the seed salt Task.make_inputs uses, so both draw the same arrays

    ref = _module_level_name(task.reference, namespace, "reference", task.source)
    if task.native_inputs is not None:
        draw = (_DRAW_NATIVE_SEEDED if task.seeded_generator else _DRAW_NATIVE).format(
            fn=_module_level_name(task.native_inputs, namespace, "input generator", task.source))
    else:
        draw = _DRAW_INIT
    if task.static_as_kwargs:
        names = [s.name for s in task.static]
        call = (
            f"    n = len(args) - {len(names)}\n"
            f"    return {ref}(*args[:n], **dict(zip({names!r}, args[n:])))"
        )
    else:
        call = f"    return {ref}(*args)"
    inputs = [
        (a.name, list(s), a.dtype, a.init.kind, a.init.mean, a.init.std, a.init.low, a.init.high, a.init.value)
        for a, s in zip(task.args, task.shapes(scale))
    ]
    static = [_literal(v, task) for v in task.static_values(scale)]
    return _ENTRY.format(
        locator=task.locator.get("id", task.name), scale=scale, salt=_stable_int(task.name),
        inputs=inputs, static=static, draw=draw, call=call,
    )


def _literal(value: object, task: Task) -> object:
    import ast

    try:
        ast.literal_eval(repr(value))
    except (ValueError, SyntaxError) as exc:
        raise TaskError(f"static value {value!r} cannot be written into an exported file", path=task.source) from exc
    return value


def _write_maxkernel_dir(task: Task, out: Path, *, scale: str) -> Path:
    import yaml

    if task.source is None:
        raise TaskError(f"task {task.name!r} has no source file to export")
    task.scale(scale)  # unknown scale -> TaskError naming the choices
    module = sys.modules.get(task.reference.__module__)
    namespace = vars(module) if module is not None else {}
    source = task.source.read_text()
    text = f"# MaxKernel task exported by mk from {task.locator.get('id', task.name)} (scale {scale}).\n"
    text += _strip_mk(source, task.source).rstrip() + "\n" + _entry_points(task, namespace, scale)
    compile(text, str(out / "reference.py"), "exec")  # fail here, not in the user's hands
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference.py").write_text(text)
    atol, rtol = task.tolerance.atol, task.tolerance.rtol
    meta = {
        "name": task.name,
        "description": task.description,
        "atol": list(atol) if isinstance(atol, tuple) else float(atol),
        "rtol": list(rtol) if isinstance(rtol, tuple) else float(rtol),
        # mk's extension: declared inputs let `mk tasks` list the task without running get_inputs
        "inputs": [
            {"name": a.name, "shape": list(shape), "dtype": a.dtype, "init": _init_dict(a.init)}
            for a, shape in zip(task.args, task.shapes(scale))
        ],
        "static_args": [{"name": s.name, "value": v} for s, v in zip(task.static, task.static_values(scale))],
    }
    (out / "kernel_task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=100))
    return out


def _init_dict(init: Any) -> dict[str, Any]:
    import dataclasses

    return {k: v for k, v in dataclasses.asdict(init).items() if k == "kind" or v != getattr(type(init)(), k)}
