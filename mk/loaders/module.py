"""mk task modules: a ``.py`` file that defines ``TASK = mk.task.Task(...)``
(or ``TASK = task_from_callable(...)``) or a function ``task() -> Task``.

The module is imported under a unique name; the task keeps its own name,
scales and tolerances, and gets ``kind="module"`` and a locator pointing at
the file so a sandbox process can load it again.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from mk.errors import TaskError
from mk.loaders import common
from mk.task import Task

KIND = "module"
_DEFINES = re.compile(r"^(TASK\s*(:[^=]*)?=|def\s+task\s*\()", re.MULTILINE)
_HINT = "define `TASK = mk.task.Task(...)` (or `TASK = mk.loaders.task_from_callable(fn, shapes)`) or `def task() -> Task`"


def looks_like_module(path: Path) -> bool:
    """A cheap text check (no import) for a top-level ``TASK =`` or ``def task(``."""
    try:
        return bool(_DEFINES.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def load(path: Path, task_id: str | None = None) -> Task:
    module = common.import_file(path, KIND)
    obj = getattr(module, "TASK", None)
    if obj is None:
        factory = getattr(module, "task", None)
        if factory is None or not callable(factory):
            raise TaskError("the module defines neither TASK nor task()", path=path, hint=_HINT)
        try:
            obj = factory()
        except TaskError:
            raise
        except Exception as exc:
            raise TaskError(f"task() failed: {type(exc).__name__}: {common.first_line(exc)}", path=path) from exc
    if not isinstance(obj, Task):
        raise TaskError(f"TASK (or task()) is of type {type(obj).__name__}, not an mk.task.Task", path=path, hint=_HINT)
    resolved = Path(path).resolve()
    return dataclasses.replace(obj, kind=KIND, source=resolved, locator=common.locator(KIND, resolved, task_id or obj.name))
