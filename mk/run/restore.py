"""A run's outcome and snapshots, rebuilt from what it holds: the trajectory in memory or the store's rows.

:func:`outcome_of` is the :class:`~mk.run.service.Outcome` of an Auto trajectory (auto, HITL and resumed runs alike),
:func:`stored_outcome` the outcome as the store holds it after an interrupt, :func:`restore_snapshots` a run's
snapshots as Auto made them, so a resumed run goes on from them.
"""

from __future__ import annotations

from typing import Any

from mk.contracts import Snapshot, as_author
from mk.harness.results import EvalResult
from mk.profile import ProfileReport
from mk.run.best import stored_best
from mk.run.output import Best
from mk.run.service import Outcome, Run


def outcome_of(traj: Any, author: Any, status: str | None = None, reason: str | None = None) -> Outcome:
    """The :class:`Outcome` of an Auto trajectory (auto, HITL and resumed runs alike)."""
    b = traj.best
    res = getattr(b, "result", None) if b else None
    best = Best(b.source, b.status, b.speedup, b.proposal, b.config, b.rationale,
                compile_check=getattr(res, "compile_check", "") or "", compiled=list(getattr(res, "compiled", []) or []),
                covered=dict(getattr(res, "covered", {}) or {}), estimate=getattr(res, "estimate", None)) \
        if b else None
    rows = [{"iteration": s.iteration, "proposal": s.proposal, "status": s.status, "reason": s.reason, "speedup": s.speedup,
             "config": s.config, "tuning": s.tuning_note} for s in traj.snapshots]
    return Outcome(traj.run_id, status or traj.status, reason or traj.stop_reason, best, rows,
                   dict(as_author(author).declined or {}))


def stored_outcome(run: Run, status: str, reason: str) -> Outcome:
    """The run's outcome as the store holds it now (after an interrupt): its best kernel so far, snapshots or nodes."""
    rows = run.store.nodes(run.id)
    found = stored_best(run.store, run.id)
    best = None
    if found is not None:
        best_row, config = found
        meta = best_row.get("meta") or {}
        best = Best(best_row.get("code") or "", "correct", best_row.get("speedup"), meta.get("name") or meta.get("head") or
                    meta.get("key") or "best so far", config, best_row.get("plan") or "")
    summary = [{"node": (r.get("meta") or {}).get("key") or r["id"][:8], "status": r["status"], "reason": r.get("reason") or "",
                "speedup": r.get("speedup")} for r in rows]
    return Outcome(run.id, status, reason, best, summary)


def restore_snapshots(store: Any, run_id: str) -> list[Any]:
    """The run's snapshots as Auto made them (plan, code, verdict, tuned config, profile), oldest first."""
    nodes = {n["id"]: n for n in store.nodes(run_id)}
    evals: dict[str, dict[str, Any]] = {}
    for e in store.query("SELECT node_id, reason, result FROM evaluations WHERE run_id = ? ORDER BY created_at", [run_id]):
        if e["node_id"]:
            evals[e["node_id"]] = e
    snaps = []
    for row in store.snapshots(run_id):
        node = nodes.get(row["node_id"] or "", {})
        ev = evals.get(row["node_id"] or "", {})
        prof = row.get("profile") or {}
        meta = node.get("meta") or {}
        result = ev.get("result")
        snaps.append(Snapshot(
            iteration=int(row["iteration"]), proposal=meta.get("name") or f"iteration {row['iteration']}",
            rationale=row.get("plan") or "", source=row.get("code") or "", config=dict(prof.get("config") or {}),
            status=row["status"], reason=node.get("reason") or ev.get("reason") or "", speedup=row.get("speedup"),
            result=(EvalResult.model_validate_json(result) if isinstance(result, str) else EvalResult.model_validate(result))
            if result else None,
            node_id=row["node_id"], tuning_note=prof.get("tuning") or "", failed_phase=prof.get("failed_phase"),
            profile=ProfileReport.model_validate(prof["report"]) if prof.get("report") else None,
            feedback=prof.get("feedback") or ""))
    return snaps
