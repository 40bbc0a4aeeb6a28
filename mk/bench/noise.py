"""Telling method from noise: each task's best kernels timed again, side by side, and ties marked.

After every method has run on a task, the best kernel of each correct row (its code and tuned config from the
store) is timed ``repeats`` more times by the same judge, round-robin over the distinct kernels so they see the
same machine state; two methods that chose the same code share one set of measurements. A row's speedup becomes
the median of its measurements (the method's own included), its ``spread`` the min and max, and methods whose
spread overlaps the fastest method's on that task are marked as tied with it: their difference is inside the noise.
Nothing is re-timed where the target cannot be timed (no device of its kind here).

A resumed benchmark (``mk bench --resume``) gives every row the same columns: what this step measured is stored
with the row (``bench_results.noise``, migration ``m012_bench_noise``) and loaded back for the rows it keeps, and
a task whose methods were not all finished (or whose re-timing was cut short) is re-timed in the resumed run with
its kept rows beside the new ones — a kept row's earlier measurements are kept and the new ones added to them, so
its median and spread cover every time its kernel was measured, and its ties are decided again.
"""

from __future__ import annotations

import hashlib
import logging
import statistics
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)


def best_kernel(store: Any, run_id: str | None) -> tuple[str, dict[str, Any], str] | None:
    """(code, tuned config, template) of a run's best node, or None."""
    if store is None or not run_id:
        return None
    from mk.run.best import stored_best

    found = stored_best(store, run_id)
    if found is None or not found[0].get("code"):
        return None
    best, config = found
    return best["code"], config, str((best.get("meta") or {}).get("template") or "")


def retime(task: Any, rows: Sequence[Any], *, store: Any, target: str, evaluate: Callable[..., Any], repeats: int = 3) -> None:
    """Time the best kernels of ``rows`` (one task, several methods) again and mark ties (rows are updated)."""
    from mk.author import PURE_JAX
    from mk.candidate import Candidate
    from mk.harness.suite import build_suite
    from mk.targets import get_target

    if repeats < 1 or not get_target(target).can_time():
        return
    kernels: dict[str, tuple[str, dict[str, Any], str]] = {}
    of_row: dict[int, str] = {}
    for i, row in enumerate(rows):
        if not row.correct or row.speedup is None:
            continue
        found = best_kernel(store, row.run_id)
        if found is None:
            continue
        key = hashlib.sha256((found[0] + repr(sorted(found[1].items()))).encode()).hexdigest()[:16]
        kernels.setdefault(key, found)
        of_row[i] = key
    if not kernels:
        return
    suite = build_suite(task).subset(1)
    runs: dict[str, list[float]] = {k: [] for k in kernels}
    for _ in range(repeats):  # round-robin: every kernel is timed once per round, in the same conditions
        for key, (code, config, template) in kernels.items():
            kw = {"require_pallas": False} if template in PURE_JAX and get_target(target).needs_kernel else {}
            res = evaluate(task, Candidate.from_source(code), target=target, suite=suite, measure=True, config=config, **kw)
            if res.status == "correct" and res.speedup is not None:
                runs[key].append(float(res.speedup))
            else:
                log.warning("bench: re-timing %s on %s gave %s (%s)", key, task.name, res.status, res.reason)
    for i, key in of_row.items():
        row = rows[i]
        # the row's own measurements first: its method's (or, for a row kept by a resume, all it had so far)
        measured = [*(row.speedup_runs or [row.speedup]), *runs[key]]
        row.speedup_runs = measured
        row.spread = (min(measured), max(measured))
        row.speedup = statistics.median(measured)
        row.tied_with = []  # decided again below, among the rows timed now
    mark_ties([rows[i] for i in of_row])


def mark_ties(rows: Sequence[Any]) -> None:
    """Mark rows (one task) whose speedup spread overlaps the fastest row's spread as tied with it."""
    timed = [r for r in rows if r.spread is not None]
    if len(timed) < 2:
        return
    best = max(timed, key=lambda r: r.speedup)
    for r in timed:
        overlaps = r.spread[1] >= best.spread[0] and best.spread[1] >= r.spread[0]
        if r is not best and overlaps:
            r.tied_with = sorted({*r.tied_with, best.method})
            best.tied_with = sorted({*best.tied_with, r.method})
