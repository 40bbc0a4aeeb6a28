"""The evaluation harness: the judge of every candidate.

Composable steps (static check, sandboxed compile/correctness/timing, cost),
each returning a typed result; :func:`evaluate` composes them into an
:class:`EvalResult`. Imports are lazy so the sandbox worker
(``python -m mk.harness.tracer``) does not pay for pydantic and the judge.

``mk.harness.evaluate`` is always the *function*, even after the submodule of
the same name is imported (import its helpers with
``from mk.harness.evaluate import static_step``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_LAZY = {
    "static_step": "mk.harness.evaluate",
    "EvalResult": "mk.harness.results",
    "StepResult": "mk.harness.results",
    "CaseResult": "mk.harness.results",
    "TimingResult": "mk.harness.results",
    "CostResult": "mk.harness.results",
    "Case": "mk.harness.suite",
    "FrozenSuite": "mk.harness.suite",
    "build_suite": "mk.harness.suite",
    "ReferenceCache": "mk.harness.suite",
    "Timeouts": "mk.harness.process",
    "TimingOptions": "mk.harness.timing",
    "compare_outputs": "mk.harness.compare",
}

__all__ = sorted([*_LAZY, "evaluate"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mk.harness' has no attribute {name!r}")


class _Harness(types.ModuleType):
    @property
    def evaluate(self) -> Any:
        return importlib.import_module("mk.harness.evaluate").evaluate

    @evaluate.setter
    def evaluate(self, _module: Any) -> None:
        """The import system binds the submodule here; the function keeps the name."""


sys.modules[__name__].__class__ = _Harness
