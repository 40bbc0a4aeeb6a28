"""mk: makes JAX code faster by writing, verifying, tuning and profiling custom kernels.

Heavy modules (JAX, DSPy) are imported lazily so that ``import mk`` and the
CLI start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Task": "mk.task",
    "ArgSpec": "mk.task",
    "Init": "mk.task",
    "Scale": "mk.task",
    "Tolerance": "mk.task",
    "StaticArg": "mk.task",
    "load_task": "mk.loaders",
    "get_target": "mk.targets",
    "evaluate": "mk.harness",
    "MkError": "mk.errors",
    "optimize": "mk.api",
    "optimize_task": "mk.job",
    "Auto": "mk.programs.auto",
    "OfflineAuthor": "mk.author",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mk' has no attribute {name!r}")
