"""Benchmark metrics, as the MaxKernel paper (and KernelBench before it) define them.

Every metric is over the N tasks of one benchmark run of one method. For each
task the runner records a :class:`TaskOutcome`:

* ``compiled`` – at least one candidate passed the harness's compile step
  (lowering for the target's platform; on a machine without the device, the
  cross-platform lowering plus interpret-mode execution);
* ``correct`` – at least one candidate was judged ``correct`` on the frozen suite;
* ``speedup`` – the best *measured* speedup of a correct candidate over the
  reference (the XLA-compiled JAX baseline), unfloored; ``None`` when the
  task has no correct candidate or its speed could not be measured.

Definitions (N = number of tasks, declined and crashed tasks included):

* **compilation rate** = #compiled / N
* **correctness rate** = #correct / N
* **fast_p** = #{correct and speedup > p} / N (strict ``>``, raw speedups, so a
  correct kernel slower than XLA counts for fast_0.5 but not fast_1);
  reported for p in :data:`FAST_P` and as a curve over :func:`curve_grid`.
* **geometric-mean speedup** ("regressions floored at 1.0"): the geometric
  mean over the *correct, measured* tasks of ``max(speedup, 1.0)`` – a kernel
  slower than XLA is not shipped, so it counts as the baseline (1.0x) instead
  of dragging the mean below what a user would get.
  ``geomean_speedup_all`` is the same over *all* N tasks, where a task without a
  correct, measured kernel also counts as 1.0 (the user keeps XLA there); it is
  the end-to-end number and is never above ``geomean_speedup``.

Where speed cannot be measured (no device of the target's kind: correctness ran
in interpret mode) no speed number is shown: ``speed`` is ``"unmeasured"``,
every speed metric is ``None`` and ``speed_note`` says why. When some correct
tasks were measured and others were not (a timing step failed), ``speed`` is
``"partial"``: unmeasured tasks never count as fast and are left out of
``geomean_speedup`` (they count as 1.0 in ``geomean_speedup_all``), and the note
gives their number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

#: the thresholds the paper reports fast_p at
FAST_P: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class TaskOutcome:
    """What one method achieved on one task (the input to the metrics)."""

    task: str
    compiled: bool
    correct: bool
    speedup: float | None = None  # best measured speedup of a correct candidate, unfloored

    @property
    def measured(self) -> bool:
        return self.correct and self.speedup is not None


@dataclass
class Metrics:
    """The paper's metrics for one method over one set of tasks."""

    tasks: int
    compiled: int
    correct: int
    compilation_rate: float
    correctness_rate: float
    speed: str  # measured | partial | unmeasured
    speed_note: str = ""
    measured: int = 0
    geomean_speedup: float | None = None
    geomean_speedup_all: float | None = None
    fast_p: dict[str, float | None] = field(default_factory=dict)
    fast_p_curve: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def geomean_floored(speedups: Iterable[float], floor: float = 1.0) -> float | None:
    """Geometric mean of ``max(s, floor)``; None for no values."""
    vals = [max(float(s), floor) for s in speedups]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fast_p(outcomes: Sequence[TaskOutcome], p: float) -> float:
    """Fraction of all tasks that are correct with a measured speedup strictly above ``p``."""
    if not outcomes:
        return 0.0
    return sum(1 for o in outcomes if o.measured and o.speedup > p) / len(outcomes)


def curve_grid(outcomes: Sequence[TaskOutcome], step: float = 0.05) -> list[float]:
    """p values for the fast_p curve: a regular grid from 0 to past the largest speedup (at least 2.5),
    plus each measured speedup itself so the curve's steps sit where they really are."""
    top = max([2.5] + [o.speedup * 1.1 for o in outcomes if o.measured])
    n = int(math.ceil(top / step))
    grid = {round(i * step, 6) for i in range(n + 1)}
    grid.update(float(o.speedup) for o in outcomes if o.measured)
    return sorted(grid)


def fast_p_curve(outcomes: Sequence[TaskOutcome], ps: Sequence[float] | None = None) -> list[tuple[float, float]]:
    """(p, fast_p) pairs over ``ps`` (default :func:`curve_grid`)."""
    ps = curve_grid(outcomes) if ps is None else ps
    return [(float(p), fast_p(outcomes, p)) for p in ps]


def compute_metrics(outcomes: Sequence[TaskOutcome], *, can_time: bool = True, unmeasured_reason: str = "") -> Metrics:
    """The metrics for ``outcomes``. ``can_time=False`` (no device of the target kind) means no speed numbers."""
    n = len(outcomes)
    compiled = sum(o.compiled for o in outcomes)
    correct = sum(o.correct for o in outcomes)
    m = Metrics(n, compiled, correct, compiled / n if n else 0.0, correct / n if n else 0.0, speed="measured")
    measured = [o for o in outcomes if o.measured]
    m.measured = len(measured)
    missing = correct - len(measured)
    if not can_time or (correct and not measured):
        m.speed = "unmeasured"
        m.speed_note = unmeasured_reason or "speed was not measured for any correct task"
        m.fast_p = {_key(p): None for p in FAST_P}
        return m
    if missing:
        m.speed = "partial"
        m.speed_note = (f"{missing} correct task(s) have no speed measurement: they never count as fast, are left out of "
                        "geomean_speedup and count as 1.0 in geomean_speedup_all")
    elif not correct:
        m.speed_note = "no task has a correct kernel: geomean_speedup is undefined; every task keeps the baseline"
    m.geomean_speedup = geomean_floored(o.speedup for o in measured)
    m.geomean_speedup_all = geomean_floored([o.speedup for o in measured] + [1.0] * (n - len(measured))) if n else None
    m.fast_p = {_key(p): fast_p(outcomes, p) for p in FAST_P}
    m.fast_p_curve = fast_p_curve(outcomes)
    return m


def _key(p: float) -> str:
    return f"fast_{p:g}"


__all__ = ["FAST_P", "Metrics", "TaskOutcome", "compute_metrics", "curve_grid", "fast_p", "fast_p_curve", "geomean_floored"]
