"""The one rule for "the best kernel" of a run, whatever holds the candidates (snapshots, search nodes, rows).

The fastest correct candidate whose speed was measured; when none was measured (no device of the target's kind),
the first correct one in the order given (the earliest found). Candidates that are not ``correct`` never win.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")


def _attr(name: str) -> Callable[[Any], Any]:
    def get(item: Any) -> Any:
        return item.get(name) if isinstance(item, dict) else getattr(item, name, None)

    return get


def best_of(items: Iterable[T], *, status: Callable[[T], Any] = _attr("status"),
            speedup: Callable[[T], Any] = _attr("speedup")) -> T | None:
    """The best of ``items`` (objects or dicts with ``status`` and ``speedup``), or None when none is correct."""
    correct = [x for x in items if status(x) == "correct"]
    measured = [x for x in correct if speedup(x) is not None]
    if measured:
        return max(measured, key=speedup)
    return correct[0] if correct else None
