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


def tuned_config(store: Any, run_id: str, node: dict[str, Any], snapshots: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The tuned config of a stored node: its meta's (a search node), else its snapshot's (an Auto attempt);
    ``snapshots``: the run's snapshots when the caller has read them already."""
    meta = node.get("meta") or {}
    if meta.get("config"):
        return dict(meta["config"])
    return next((dict((s.get("profile") or {}).get("config") or {}) for s in (snapshots if snapshots is not None else
                 store.snapshots(run_id)) if s.get("node_id") == node["id"]), {})


def stored_best(store: Any, run_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The best stored node of ``run_id`` and its tuned config, or None when no node is correct."""
    best = best_of(store.nodes(run_id))
    return (best, tuned_config(store, run_id, best)) if best is not None else None
