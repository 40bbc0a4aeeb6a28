"""Auto: one optimisation trajectory.

Per iteration: the author proposes a candidate (plan + code), the judge
validates it (compile, frozen suite), the tuner searches its CONFIG_SPACE, the
cost/timing numbers become the snapshot, and the snapshot feeds the next
proposal. The suite is frozen before the first proposal. At the end Auto rolls
back to the fastest correct snapshot — not the last one — and says why it
stopped (iterations, target speedup, no more proposals, budget).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from mk.author.proposal import Proposal
from mk.candidate import Candidate
from mk.errors import BudgetExceeded, CandidateError
from mk.harness.results import EvalResult
from mk.harness.suite import FrozenSuite, build_suite
from mk.task import Task
from mk.tuning.autotune import autotune

log = logging.getLogger(__name__)


class Author(Protocol):
    """Anything that proposes the next candidate given the history so far."""

    name: str

    def next(self, task: Task, target: str, history: list["Snapshot"]) -> Proposal | None: ...


@dataclass
class Snapshot:
    iteration: int
    proposal: str
    rationale: str
    source: str
    config: dict[str, Any]
    status: str
    reason: str
    speedup: float | None
    result: EvalResult | None
    node_id: str | None = None
    tuning_note: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def feedback(self) -> str:
        """What the next plan should know about this attempt."""
        parts = [f"iteration {self.iteration} ({self.proposal}): {self.status}"]
        if self.reason:
            parts.append(self.reason)
        if self.speedup is not None:
            parts.append(f"speedup {self.speedup:.2f}x")
        if self.config:
            parts.append(f"config {self.config}")
        return "; ".join(parts)


@dataclass
class AutoResult:
    task: str
    target: str
    suite_hash: str
    snapshots: list[Snapshot] = field(default_factory=list)
    stop_reason: str = ""
    run_id: str | None = None

    @property
    def best(self) -> Snapshot | None:
        correct = [s for s in self.snapshots if s.correct]
        if not correct:
            return None
        measured = [s for s in correct if s.speedup is not None]
        if measured:
            return max(measured, key=lambda s: s.speedup)
        return correct[0]

    @property
    def status(self) -> str:
        return "correct" if self.best else "no_correct_candidate"


class OfflineAuthorAdapter:
    """Feeds the offline author's proposals one per iteration."""

    def __init__(self, author: Any):
        self.name = author.name
        self._author = author
        self._queue: list[Proposal] | None = None
        self.declined: dict[str, str] = {}

    def next(self, task: Task, target: str, history: list[Snapshot]) -> Proposal | None:
        if self._queue is None:
            authored = self._author.propose(task, target)
            self._queue = list(authored.proposals)
            self.declined = authored.declined
        return self._queue.pop(0) if self._queue else None


class Auto:
    def __init__(
        self,
        author: Author,
        *,
        target: str = "tpu",
        iterations: int = 4,
        target_speedup: float | None = None,
        evaluate: Callable[..., EvalResult] | None = None,
        store: Any = None,
        tune: bool = True,
        max_trials: int = 6,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ):
        if evaluate is None:
            from mk.harness.evaluate import evaluate
        self.author = author
        self.target = target
        self.iterations = iterations
        self.target_speedup = target_speedup
        self.evaluate = evaluate
        self.store = store
        self.tune = tune
        self.max_trials = max_trials
        self.on_event = on_event or (lambda kind, data: None)

    def run(self, task: Task, *, suite: FrozenSuite | None = None, run_id: str | None = None) -> AutoResult:
        suite = suite or build_suite(task)  # frozen before the first proposal
        if self.store is not None:
            self.store.upsert_task(task.fingerprint(), task.name, task.kind, str(task.source) if task.source else None, task.describe())
            self.store.record_suite(suite.hash, task.fingerprint(), [c.key for c in suite.cases])
            run_id = run_id or self.store.create_run(task.fingerprint(), "auto", {"target": self.target, "author": self.author.name})
        result = AutoResult(task.name, self.target, suite.hash, run_id=run_id)
        self.on_event("suite", {"hash": suite.hash, "cases": len(suite.cases)})
        parent: str | None = None
        try:
            for it in range(1, self.iterations + 1):
                proposal = self.author.next(task, self.target, result.snapshots)
                if proposal is None:
                    result.stop_reason = f"the {self.author.name} author has no further proposals"
                    break
                self.on_event("proposal", {"iteration": it, "name": proposal.name, "rationale": proposal.rationale})
                snap = self._iteration(task, suite, it, proposal, run_id, parent)
                parent = snap.node_id or parent
                result.snapshots.append(snap)
                self.on_event("snapshot", {"iteration": it, "status": snap.status, "reason": snap.reason, "speedup": snap.speedup})
                if self.target_speedup and snap.speedup and snap.speedup >= self.target_speedup:
                    result.stop_reason = f"reached the target speedup {self.target_speedup}x"
                    break
            else:
                result.stop_reason = f"ran the maximum of {self.iterations} iterations"
        except BudgetExceeded as exc:
            result.stop_reason = f"budget spent: {exc}"
        if self.store is not None and run_id:
            best = result.best
            self.store.finish_run(run_id, result.status, result.stop_reason + (f"; best: {best.proposal}" if best else ""))
        return result

    def _iteration(self, task: Task, suite: FrozenSuite, it: int, proposal: Proposal, run_id: str | None, parent: str | None) -> Snapshot:
        node_id = None
        code_hash = hashlib.sha256(proposal.source.encode()).hexdigest()[:16]
        if self.store is not None and run_id:
            node_id = self.store.add_node(
                run_id, parent, code=proposal.source, plan=proposal.rationale, code_hash=code_hash,
                status="pending", reason="", speedup=None, depth=it, meta={"template": proposal.template, "name": proposal.name},
            )
        try:
            candidate = Candidate.from_source(proposal.source)
        except CandidateError as exc:
            return self._snapshot(it, proposal, {}, "rejected", str(exc), None, node_id, run_id, suite)
        if self.tune and candidate.config_space:
            tuned = autotune(
                task, candidate, target=self.target, suite=suite, evaluate=self.evaluate, store=self.store,
                study_name=f"{run_id or 'local'}-{it}-{candidate.digest}", run_id=run_id, node_id=node_id, max_trials=self.max_trials,
                on_trial=lambda t: self.on_event("trial", {"iteration": it, "params": t.params, "status": t.status, "reason": t.reason}),
            )
            res, config, note = tuned.result, tuned.config, tuned.note
            if res is None:
                return self._snapshot(it, proposal, config, "incorrect", note, None, node_id, run_id, suite, note=note)
        else:
            res, config, note = self.evaluate(task, candidate, target=self.target, suite=suite, config={}), {}, ""
        return self._snapshot(it, proposal, config, res.status, res.reason, res, node_id, run_id, suite, note=note)

    def _snapshot(self, it, proposal, config, status, reason, res, node_id, run_id, suite, note="") -> Snapshot:
        speedup = res.speedup if res is not None else None
        snap = Snapshot(it, proposal.name, proposal.rationale, proposal.source, config, status, reason, speedup, res, node_id, note)
        if self.store is not None and run_id:
            self.store.update_node(node_id, status=status, reason=reason, speedup=speedup)
            timings = res.timing.model_dump() if res is not None and res.timing else {}
            cost = res.cost.model_dump() if res is not None and res.cost else {}
            self.store.add_snapshot(run_id, node_id, it, code=proposal.source, plan=proposal.rationale, status=status,
                                    speedup=speedup, timings=timings, profile={"cost": cost, "config": config, "tuning": note})
            if res is not None:
                self.store.record_evaluation(run_id=run_id, node_id=node_id, task_name=res.task, status=status, reason=reason,
                                             suite_hash=suite.hash, speedup=speedup, result_json=res.model_dump_json())
        return snap
