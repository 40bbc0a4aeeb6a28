"""Benchmark rows in the store (tables ``bench_runs`` and ``bench_results``, migration ``m009_bench``)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from mk.bench.metrics import Metrics
from mk.bench.results import TaskRow
from mk.store import Store, new_id, to_json


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def create_bench(store: Store, suite: str, target: str, scale: str | None, methods: Sequence[str], author: str,
                 config: Mapping[str, Any]) -> str:
    bench_id = new_id()
    store.execute("INSERT INTO bench_runs VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 'running', ?, NULL)",
                  [bench_id, str(suite), target, scale, to_json(list(methods)), author, to_json(dict(config)), _now()])
    return bench_id


def record_row(store: Store, bench_id: str, row: TaskRow) -> None:
    progress = [s.__dict__ for s in row.progress]
    store.execute(
        """INSERT OR REPLACE INTO bench_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [bench_id, row.method, row.task, row.fingerprint, row.run_id, row.status, row.reason, row.compiled, row.correct,
         row.speedup, row.candidates, to_json(progress), row.seconds, _now()],
    )


def finish_bench(store: Store, bench_id: str, metrics: Mapping[str, Metrics], status: str = "finished") -> None:
    """Record the metrics and the final status (``finished``, or ``interrupted`` for a partial bench)."""
    store.execute("UPDATE bench_runs SET metrics = ?, status = ?, finished_at = ? WHERE id = ?",
                  [to_json({k: v.to_dict() for k, v in metrics.items()}), status, _now(), bench_id])

