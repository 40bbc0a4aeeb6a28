"""Task loaders: turn what a user has into a :class:`~mk.task.Task`.

``load_task`` accepts a Task, a Python callable plus shapes, an mk task module,
a MaxKernel task directory, a JAXBench ``baseline.py``, a built-in id
(``jaxbench:12p_RMSNorm``), a :class:`TaskRef` or a task's ``locator`` dict.
Loading never allocates full-size inputs: shapes come from ``jax.eval_shape``
of the task's own generator, which runs for real only at evaluation time
(:attr:`Task.native_inputs`). Each file loader documents its conventions:
:mod:`mk.loaders.maxkernel`, :mod:`mk.loaders.jaxbench`,
:mod:`mk.loaders.module`, :mod:`mk.loaders.callable`.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any, Mapping

from mk.errors import TaskError
from mk.loaders import jaxbench as _jaxbench
from mk.loaders import maxkernel as _maxkernel
from mk.loaders import module as _module
from mk.loaders.callable import task_from_callable
from mk.loaders.discover import BUILTIN_PREFIX, TaskRef, discover
from mk.task import Task

__all__ = ["TaskRef", "discover", "load_ref", "load_task", "load_tasks", "task_from_callable"]


def load_task(spec: Any, *, task_id: str | None = None, shapes: Any = None, **kwargs: Any) -> Task:
    """One task from ``spec``. For a path holding several tasks, ``task_id``
    (an id or name from :func:`discover`) picks one; for a single task it is
    the id recorded in the locator. ``shapes`` and ``kwargs`` go to
    :func:`task_from_callable` when ``spec`` is a callable."""
    if isinstance(spec, Task):
        return spec
    if isinstance(spec, TaskRef):
        return load_ref(spec, task_id=task_id)
    if isinstance(spec, Mapping) and "kind" in spec:
        return _from_locator(spec)
    if isinstance(spec, (str, Path)):
        if shapes is not None or kwargs:
            raise TaskError(f"shapes and options {sorted(kwargs)} only apply when the task is a Python callable", path=str(spec))
        if isinstance(spec, str) and spec.startswith(BUILTIN_PREFIX):
            return _builtin(spec)
        refs = discover(spec)
        if len(refs) == 1:
            return load_ref(refs[0], task_id=task_id)
        if task_id is None:
            raise TaskError(f"this path holds {len(refs)} tasks", path=str(spec),
                            hint=f"pass task_id= one of: {', '.join(r.id for r in refs[:20])}" + (" ..." if len(refs) > 20 else ""))
        picked = [r for r in refs if task_id in (r.id, r.name)]
        if len(picked) != 1:
            raise TaskError(f"{'no' if not picked else 'more than one'} task here has id or name {task_id!r}", path=str(spec),
                            hint=f"choose one of: {', '.join(r.id for r in refs[:20])}")
        return load_ref(picked[0])
    if builtins.callable(spec):
        return task_from_callable(spec, shapes, **kwargs)
    raise TaskError(f"cannot load a task from a {type(spec).__name__}",
                    hint="give a callable plus shapes, a task path, or a built-in id such as 'jaxbench:12p_RMSNorm'")


def load_ref(ref: TaskRef, *, task_id: str | None = None) -> Task:
    """Load the task a :class:`TaskRef` from :func:`discover` points at."""
    ident = task_id or ref.id
    if ref.kind == "builtin":
        return _builtin(ref.id)
    if ref.path is None:
        raise TaskError(f"task reference {ref.id!r} has no path")
    if ref.kind == _maxkernel.KIND:
        return _maxkernel.load(Path(ref.path), ident)
    if ref.kind == _jaxbench.KIND:
        return _jaxbench.load(Path(ref.path), ident)
    if ref.kind == _module.KIND:
        return _module.load(Path(ref.path), ident)
    raise TaskError(f"unknown task kind {ref.kind!r}", path=ref.path)


def load_tasks(path: str | Path) -> list[Task]:
    """Every task ``path`` holds (see :func:`discover`); the first malformed one raises."""
    return [load_ref(r) for r in discover(path)]


def _from_locator(loc: Mapping[str, Any]) -> Task:
    kind, path, ident = loc.get("kind"), loc.get("path"), loc.get("id")
    if kind == "builtin" or (isinstance(ident, str) and ident.startswith(BUILTIN_PREFIX) and not path):
        return _builtin(str(ident))
    if kind == "callable":
        raise TaskError(f"a task built from a callable ({ident}) cannot be re-loaded from its locator",
                        hint="write it as an mk task module (TASK = task_from_callable(...)) so other processes can load it")
    if not path:
        raise TaskError(f"the locator {dict(loc)} has no path")
    refs = discover(path)
    if len(refs) == 1:
        return load_ref(refs[0], task_id=ident)
    return load_task(path, task_id=ident)


def _builtin(task_id: str) -> Task:
    from mk.loaders.discover import _suite

    ident = task_id if task_id.startswith(BUILTIN_PREFIX) else BUILTIN_PREFIX + task_id
    try:
        return _suite().load_builtin(ident)
    except TaskError:
        raise
    except (KeyError, LookupError) as exc:
        raise TaskError(f"unknown built-in task {ident!r}", hint="run `mk tasks jaxbench` to list the built-in ids") from exc
