"""Find the tasks a path holds, without importing them.

* a single task: a MaxKernel task directory (``reference.py`` and/or
  ``kernel_task.yaml``), a JAXBench ``baseline.py`` (or a folder holding one),
  an mk task module (``TASK =`` or ``def task(``), or a loose ``.py`` that
  defines ``create_inputs`` and ``workload``;
* a dataset directory: each child that is a task directory or task file,
  searched one level further for children that are plain folders (datasets
  grouped by category);
* ``"jaxbench"``: every built-in suite task (``jaxbench:<id>`` loads one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mk.errors import TaskError
from mk.loaders import jaxbench, maxkernel, module

BUILTIN_PREFIX = "jaxbench:"
_SKIP = ("_", ".")


@dataclass(frozen=True)
class TaskRef:
    """Where one task lives: enough to load it (``mk.loaders.load_ref``)."""

    name: str
    kind: str  # maxkernel | jaxbench | module | builtin
    path: Path | None
    id: str


def discover(path: str | Path) -> list[TaskRef]:
    """The tasks ``path`` holds, sorted by id; raises TaskError when there are none."""
    if str(path) == "jaxbench" and not Path(path).exists():
        return builtin_refs()
    if isinstance(path, str) and path.startswith(BUILTIN_PREFIX):
        return [TaskRef(path[len(BUILTIN_PREFIX):], "builtin", None, path)]
    root = Path(path).expanduser().resolve()
    if not root.exists():
        raise TaskError("no such file or directory", path=root, hint="give a task file, a task directory or a dataset directory")
    single = _as_task(root, root.parent)
    if single is not None:
        return [single]
    if root.is_file():
        raise TaskError("not a task file", path=root,
                        hint="a task file is a JAXBench baseline (create_inputs + workload) or an mk module defining TASK or task()")
    refs: list[TaskRef] = []
    for child in _children(root):
        ref = _as_task(child, root)
        if ref is not None:
            refs.append(ref)
        elif child.is_dir():  # a category folder: one level further
            refs.extend(r for r in (_as_task(g, root) for g in _children(child)) if r is not None)
    if not refs:
        raise TaskError("no tasks found here", path=root,
                        hint="expected MaxKernel task dirs (reference.py + kernel_task.yaml), JAXBench baseline.py files or mk task modules")
    return sorted(refs, key=lambda r: r.id)


def builtin_refs() -> list[TaskRef]:
    suite = _suite()
    ids = [i if i.startswith(BUILTIN_PREFIX) else BUILTIN_PREFIX + i for i in suite.list_builtin()]
    return [TaskRef(i[len(BUILTIN_PREFIX):], "builtin", None, i) for i in ids]


def _suite():  # noqa: ANN202 - a module
    try:
        from mk import suite
    except ImportError as exc:
        raise TaskError("the built-in task suite is not available in this install", hint="reinstall mk") from exc
    return suite


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(c for c in folder.iterdir() if not c.name.startswith(_SKIP))
    except OSError as exc:
        raise TaskError(f"cannot list the directory: {exc}", path=folder) from exc


def _as_task(path: Path, root: Path) -> TaskRef | None:
    found = _kind_of(path)
    if found is None:
        return None
    kind, home, load_path = found
    name = home.stem if home.is_file() else home.name
    ident = home.relative_to(root).with_suffix("").as_posix() if root in home.parents else name
    return TaskRef(name, kind, load_path, ident)


def _kind_of(path: Path) -> tuple[str, Path, Path] | None:
    """(kind, the task's home: its folder or file, the path its loader takes)."""
    if path.is_dir():
        if maxkernel.is_task_dir(path):
            return maxkernel.KIND, path, path
        if (path / jaxbench.BASELINE_NAME).is_file():
            return jaxbench.KIND, path, path / jaxbench.BASELINE_NAME
        return None
    if not path.is_file():
        return None
    if path.name in (maxkernel.YAML_NAME, maxkernel.REFERENCE_NAME):
        return maxkernel.KIND, path.parent, path.parent
    if path.suffix != ".py":
        return None
    if path.name == jaxbench.BASELINE_NAME:
        return jaxbench.KIND, path.parent, path
    if module.looks_like_module(path):
        return module.KIND, path, path
    if jaxbench.looks_like_baseline(path):
        return jaxbench.KIND, path, path
    return None
