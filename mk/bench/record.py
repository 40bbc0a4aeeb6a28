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
    write_progress(store, bench_id)
    return bench_id


def write_progress(store: Store, bench_id: str) -> None:
    """Rewrite the benchmark's progress file ``<store>.benches/<id>.json`` (its ``list_benches`` row plus the writer's
    pid and host): what ``mk bench --list`` reads while the benchmark holds the store, and how it tells a killed
    benchmark from a running one (:func:`mk.store.shown_status`). Best effort, never raises."""
    try:
        rows = _bench_rows(store, bench_id)
        if rows:
            store.write_progress_file(store.bench_progress_dir, bench_id, rows[0])
    except Exception:  # noqa: BLE001 - a progress file is a convenience; the store is the record
        pass


def record_row(store: Store, bench_id: str, row: TaskRow) -> None:
    progress = [s.__dict__ for s in row.progress]
    noise = None if row.spread is None else {"speedup_runs": list(row.speedup_runs), "spread": list(row.spread),
                                              "tied_with": list(row.tied_with)}
    store.execute(
        """INSERT OR REPLACE INTO bench_results (bench_id, method, task, task_fingerprint, run_id, status, reason, compiled,
                  correct, speedup, candidates, progress, seconds, created_at, noise)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [bench_id, row.method, row.task, row.fingerprint, row.run_id, row.status, row.reason, row.compiled, row.correct,
         row.speedup, row.candidates, to_json(progress), row.seconds, _now(), to_json(noise)],
    )
    write_progress(store, bench_id)


def finish_bench(store: Store, bench_id: str, metrics: Mapping[str, Metrics], status: str = "finished") -> None:
    """Record the metrics and the final status (``finished``, or ``interrupted`` for a partial bench)."""
    store.execute("UPDATE bench_runs SET metrics = ?, status = ?, finished_at = ? WHERE id = ?",
                  [to_json({k: v.to_dict() for k, v in metrics.items()}), status, _now(), bench_id])
    write_progress(store, bench_id)


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
        noise = r.get("noise") if not isinstance(r.get("noise"), str) else json.loads(r["noise"])
        noise = noise or {}  # what the noise step measured (mk.bench.noise); none when it did not run for this row
        done.append(TaskRow(r["method"], r["task"], r["status"], r["reason"] or "", bool(r["compiled"]), bool(r["correct"]),
                            r["speedup"], candidates=int(r["candidates"] or 0), run_id=r["run_id"],
                            fingerprint=r["task_fingerprint"], seconds=float(r["seconds"] or 0.0),
                            best=best.name if best is not None else "", progress=steps,
                            speedup_runs=[float(v) for v in noise.get("speedup_runs") or []],
                            spread=tuple(noise["spread"]) if noise.get("spread") else None,
                            tied_with=list(noise.get("tied_with") or [])))
    return bench, done


def list_benches(store: Store, limit: int = 30) -> list[dict[str, Any]]:
    """The stored benchmarks, newest first: id, suite, target, methods, status as stored (``running`` for one in
    progress or one whose process was killed: ``mk bench --list`` tells them apart), started/finished, and how many
    (method, task) rows each recorded."""
    return _bench_rows(store, None, limit)


def _bench_rows(store: Store, bench_id: str | None, limit: int = 30) -> list[dict[str, Any]]:
    import json

    rows = store.query(
        """SELECT b.id, b.suite, b.target, b.scale, b.methods, b.author, b.status, b.started_at, b.finished_at,
                  (SELECT count(*) FROM bench_results r WHERE r.bench_id = b.id) AS rows
           FROM bench_runs b WHERE (? IS NULL OR b.id = ?) ORDER BY b.started_at DESC LIMIT ?""",
        [bench_id, bench_id, int(limit)])
    out = []
    for r in rows:
        r = dict(r)
        if isinstance(r.get("methods"), str):
            r["methods"] = json.loads(r["methods"])
        out.append(r)
    return out


def reopen_bench(store: Store, bench_id: str) -> None:
    store.execute("UPDATE bench_runs SET status = 'running', finished_at = NULL WHERE id = ?", [bench_id])
    write_progress(store, bench_id)  # this process is the writer now


def close_task_runs(store: Store, bench_id: str, reason: str) -> int:
    """Mark the benchmark's task runs still ``running`` (cut short by Ctrl-C, or left by a killed process) as
    ``interrupted`` with ``reason``; how many were."""
    rows = store.query("SELECT id FROM runs WHERE mode = 'bench' AND status = 'running' AND "
                       "json_extract_string(config, '$.settings.bench') = ?", [bench_id])
    for r in rows:
        store.execute("UPDATE runs SET status = 'interrupted', reason = ?, finished_at = ? WHERE id = ?", [reason, _now(), r["id"]])
        store.write_progress(r["id"])
    return len(rows)

