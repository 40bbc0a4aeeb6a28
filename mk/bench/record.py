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


#: the BenchConfig fields a resumed benchmark takes from its stored config (the rest are the caller's: db, factories)
RESUMED = ("iterations", "samples", "tune", "max_trials", "measure", "search", "repeats", "plots", "out", "lm")


def load_bench(store: Store, bench_id: str) -> tuple[dict[str, Any], list[TaskRow]]:
    """The stored benchmark ``bench_id`` (its ``bench_runs`` row, JSON decoded) and the rows it finished."""
    import json

    from mk.bench.results import Step, best_step
    from mk.errors import StoreError

    rows = store.query("SELECT * FROM bench_runs WHERE id = ? OR id LIKE ?", [bench_id, bench_id + "%"]) if bench_id else []
    if len(rows) != 1:
        raise StoreError(f"no benchmark matches {bench_id!r}" if not rows else f"{len(rows)} benchmarks match {bench_id!r}",
                         hint="`mk bench` prints its bench id when it stops; give that id (or a unique prefix)")
    bench = dict(rows[0])
    for key in ("methods", "config", "metrics"):
        if isinstance(bench.get(key), str):
            bench[key] = json.loads(bench[key])
    done = []
    for r in store.query("SELECT * FROM bench_results WHERE bench_id = ? ORDER BY created_at", [bench["id"]]):
        progress = r["progress"] if not isinstance(r["progress"], str) else json.loads(r["progress"])
        steps = [Step(**s) for s in progress or []]
        best = best_step(steps)  # the row's best was picked from these very steps: the same rule gives it back
        done.append(TaskRow(r["method"], r["task"], r["status"], r["reason"] or "", bool(r["compiled"]), bool(r["correct"]),
                            r["speedup"], candidates=int(r["candidates"] or 0), run_id=r["run_id"],
                            fingerprint=r["task_fingerprint"], seconds=float(r["seconds"] or 0.0),
                            best=best.name if best is not None else "", progress=steps))
    return bench, done


def list_benches(store: Store, limit: int = 30) -> list[dict[str, Any]]:
    """The stored benchmarks, newest first: id, suite, target, methods, status (``running`` for one in progress or one
    whose process was killed), started/finished, and how many (method, task) rows each recorded."""
    import json

    rows = store.query(
        """SELECT b.id, b.suite, b.target, b.scale, b.methods, b.author, b.status, b.started_at, b.finished_at,
                  (SELECT count(*) FROM bench_results r WHERE r.bench_id = b.id) AS rows
           FROM bench_runs b ORDER BY b.started_at DESC LIMIT ?""", [int(limit)])
    out = []
    for r in rows:
        r = dict(r)
        if isinstance(r.get("methods"), str):
            r["methods"] = json.loads(r["methods"])
        out.append(r)
    return out


def reopen_bench(store: Store, bench_id: str) -> None:
    store.execute("UPDATE bench_runs SET status = 'running', finished_at = NULL WHERE id = ?", [bench_id])


def close_task_runs(store: Store, bench_id: str, reason: str) -> int:
    """Mark the benchmark's task runs still ``running`` (cut short by Ctrl-C, or left by a killed process) as
    ``interrupted`` with ``reason``; how many were."""
    rows = store.query("SELECT id FROM runs WHERE mode = 'bench' AND status = 'running' AND "
                       "json_extract_string(config, '$.settings.bench') = ?", [bench_id])
    for r in rows:
        store.execute("UPDATE runs SET status = 'interrupted', reason = ?, finished_at = ? WHERE id = ?", [reason, _now(), r["id"]])
    return len(rows)

