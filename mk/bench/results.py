"""Typed values a benchmark run produces: one :class:`TaskRow` per (method, task), one :class:`BenchResult` per run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mk.bench.metrics import Metrics, TaskOutcome

METHODS = ("auto", "search", "best-of-n")


@dataclass
class Step:
    """One judged candidate in a task's progression: ``step`` is the iteration (auto), the sample
    (best-of-n) or the node order (search); ``depth`` is the search depth (the iteration for auto)."""

    step: int
    depth: int
    name: str
    status: str
    compiled: bool
    speedup: float | None = None
    reason: str = ""
    #: the judged source's digest (``Candidate.digest``), where the method records it: what a row's verdict is of
    digest: str = ""


def best_step(steps: list[Step]) -> Step | None:
    """The step a row is summarised by: the best correct one (:func:`mk.run.best.best_of`: fastest measured), else the
    failure that got furthest (compiled first, then incorrect < timeout < crashed < compile_error < rejected)."""
    correct = [s for s in steps if s.status == "correct"]
    if correct:
        from mk.run.best import best_of

        return best_of(correct, status=lambda s: s.status, speedup=lambda s: s.speedup)
    order = {"incorrect": 0, "timeout": 1, "crashed": 2, "compile_error": 3, "rejected": 4}
    return min(steps, key=lambda s: (not s.compiled, order.get(s.status, 9))) if steps else None


@dataclass
class TaskRow:
    """What one method achieved on one task. ``status`` is the best verdict (``correct``, ``incorrect``,
    ``compile_error``, ``rejected``, ``timeout``, ``crashed``), ``declined`` when the author proposed
    nothing, or ``error`` when the task itself could not be run."""

    method: str
    task: str
    status: str
    reason: str = ""
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None
    timing_note: str = ""
    candidates: int = 0
    run_id: str | None = None
    fingerprint: str | None = None
    seconds: float = 0.0
    best: str = ""
    progress: list[Step] = field(default_factory=list)
    #: the best kernel's speedups when timed again beside the other methods' (mk.bench.noise), its own first
    speedup_runs: list[float] = field(default_factory=list)
    #: (min, max) of ``speedup_runs``; None when it was not timed again
    spread: tuple[float, float] | None = None
    #: the methods whose spread on this task overlaps this one's best: a difference inside the noise
    tied_with: list[str] = field(default_factory=list)

    def outcome(self) -> TaskOutcome:
        return TaskOutcome(self.task, self.compiled, self.correct, self.speedup if self.correct else None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BenchResult:
    """A finished benchmark: config, per-method metrics, per-task rows and where the report went."""

    bench_id: str | None
    suite: str
    target: str
    scale: str | None
    methods: list[str]
    author: str
    can_time: bool
    speed_reason: str
    metrics: dict[str, Metrics]
    rows: list[TaskRow]
    report_path: str | None = None
    plots: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    #: why the benchmark stopped before running every task (its budget), else ""
    stop_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop_reason": self.stop_reason, "bench_id": self.bench_id, "suite": self.suite, "target": self.target, "scale": self.scale, "methods": self.methods,
            "author": self.author, "can_time": self.can_time, "speed_reason": self.speed_reason, "config": self.config,
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()}, "tasks": [r.to_dict() for r in self.rows],
            "report_path": self.report_path, "plots": self.plots,
        }
