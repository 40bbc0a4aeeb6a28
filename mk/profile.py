"""Profiles: what a measured (or unmeasurable) candidate tells the next plan.

A :class:`ProfileReport` joins the judge's timing, the XLA cost analysis, the
task analysis (the roofline floor for the target's hardware) and, where a
device exists, the heaviest ops from a ``jax.profiler`` trace. Numbers that
could not be measured stay ``None`` with the reason; nothing is estimated in
their place. The ProfileAnalyst sub-agent (or the offline author) reads
:meth:`ProfileReport.summary`.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from pydantic import BaseModel, Field

from mk.harness.results import EvalResult
from mk.task import Task

log = logging.getLogger(__name__)


class OpTime(BaseModel):
    name: str
    seconds: float
    share: float


class ProfileReport(BaseModel):
    task: str
    target: str
    hardware: str
    measured: bool
    reason: str = ""
    candidate_s: Optional[float] = None
    reference_s: Optional[float] = None
    speedup: Optional[float] = None
    flops: Optional[float] = None
    bytes: Optional[float] = None
    floor_s: Optional[float] = None
    roofline_fraction: Optional[float] = None
    bound: Optional[str] = None
    heaviest_ops: list[OpTime] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"profile of {self.task} on {self.target} ({self.hardware})"]
        if self.measured:
            lines.append(f"candidate {self.candidate_s * 1e3:.3f} ms vs reference {self.reference_s * 1e3:.3f} ms "
                         f"(speedup {self.speedup:.2f}x)")
        else:
            lines.append(f"time not measured: {self.reason}")
        if self.flops is not None:
            lines.append(f"work: {self.flops:.3g} FLOP, {self.bytes:.3g} bytes; {self.bound or '?'}-bound")
        if self.floor_s is not None:
            lines.append(f"roofline floor {self.floor_s * 1e3:.4f} ms" + (
                f"; achieved {self.roofline_fraction:.1%} of the roofline" if self.roofline_fraction is not None else ""))
        for op in self.heaviest_ops[:5]:
            lines.append(f"  {op.name}: {op.seconds * 1e3:.3f} ms ({op.share:.0%})")
        lines.extend(self.notes)
        return "\n".join(lines)


def profile(task: Task, result: EvalResult, target: str, *, scale: str | None = None) -> ProfileReport:
    """Build the report for a judged candidate (no new runs of the candidate here)."""
    from mk.hardware import bound, default_spec, roofline_fraction, spec_for_device_kind
    from mk.targets import get_target

    tgt = get_target(target)
    kind = tgt.device_kind()
    spec = (spec_for_device_kind(kind) if kind else None) or default_spec(target)
    timing = result.timing
    report = ProfileReport(task=task.name, target=target, hardware=spec.name, measured=bool(timing and timing.measured),
                           reason=(timing.reason if timing else "the candidate was not timed"))
    if timing and timing.measured:
        report.candidate_s, report.reference_s, report.speedup = timing.candidate_median_s, timing.reference_median_s, timing.speedup
    try:
        from mk.analysis import analyze

        analysis = analyze(task, scale or (result.scales[-1] if result.scales else None), specs=(spec.name,))
        report.flops, report.bytes = analysis.flops, float(analysis.min_bytes)
        floor = analysis.floors.get(spec.name)
        if floor is not None:
            report.floor_s, report.bound = floor.seconds, floor.bound
        else:
            report.bound = bound(analysis.flops, analysis.min_bytes, spec, analysis.compute_dtype)
        if report.measured and not spec.approximate and report.candidate_s:
            report.roofline_fraction = roofline_fraction(report.candidate_s, analysis.flops, analysis.min_bytes, spec,
                                                         analysis.compute_dtype)
    except Exception as exc:  # analysis is advisory: a failure is a note, not a crash
        report.notes.append(f"task analysis unavailable: {type(exc).__name__}: {exc}")
    if result.cost and result.cost.candidate_flops is not None:
        report.notes.append(f"XLA cost of the candidate (compiled for the CPU): {result.cost.candidate_flops:.3g} FLOP, "
                            f"{result.cost.candidate_bytes or 0:.3g} bytes")
    return report
