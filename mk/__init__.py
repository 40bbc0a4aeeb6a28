"""mk: makes JAX code faster by writing, verifying, tuning and profiling custom kernels.

Heavy modules (JAX, DSPy) are imported lazily so that ``import mk`` and the
CLI start fast.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from mk.home import home as _home  # standard library only: read before anything heavy

__version__ = "0.1.0"

# DSPy's response cache lives with mk's other state (MK_HOME, default ~/.mk), so reruns are predictable and one
# folder holds everything mk keeps; set DSPY_CACHEDIR to put it elsewhere. DSPy reads it when it is first imported.
# LiteLLM (DSPy's default client) would fetch a model price map from the network first; mk prices calls itself.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DSPY_CACHEDIR", str(_home() / "dspy-cache"))

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
    "resume": "mk.api",
    "optimize_task": "mk.job",
    "Auto": "mk.programs.auto",
    "OfflineAuthor": "mk.author",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mk' has no attribute {name!r}")
