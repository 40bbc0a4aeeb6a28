"""mk.programs: the sub-agents (one small dspy.Module each) and the loops built from them.

Names are imported on first use, so importing one module of this package
(``mk.programs.auto``) does not load DSPy.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CompileFixer": "mk.programs.compile_fixer",
    "Implementer": "mk.programs.implementer",
    "Planner": "mk.programs.planner",
    "ProfileAnalyst": "mk.programs.profile_analyst",
    "TestSynthesizer": "mk.programs.test_synthesizer",
    "TuningSpaceProposer": "mk.programs.tuning_space",
    "Implementation": "mk.programs.validation",
    "InvalidOutput": "mk.programs.validation",
    "run_validated": "mk.programs.validation",
    "Auto": "mk.programs.auto",
    "Plan": "mk.programs.auto",
    "Search": "mk.programs.search",
    "SearchConfig": "mk.programs.search",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mk.programs' has no attribute {name!r}")
