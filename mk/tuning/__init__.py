"""Tuning: Optuna studies persisted in the mk store.

``journal_storage(store, name)`` gives an ``optuna.storages.JournalStorage``
whose log lives in the same DuckDB file as everything else (see
:mod:`mk.tuning.journal`). Optuna is imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DuckDBJournalBackend": "mk.tuning.journal",
    "journal_storage": "mk.tuning.journal",
    "fail_interrupted_trials": "mk.tuning.journal",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mk.tuning' has no attribute {name!r}")
