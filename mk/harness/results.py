"""Typed results of an evaluation: one :class:`StepResult` per step, one
:class:`CaseResult` per suite case, and the :class:`EvalResult` verdict."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

#: ``unverifiable_here``: the judge could not check the candidate on this machine (it needs a device to lower or
#: to run), which says nothing about it being wrong; ``harness_error``: mk itself failed; ``outside_envelope``: the
#: candidate (a kernel mk wrote) refuses the task's inputs because they lie outside what it was verified on.
Status = Literal["correct", "incorrect", "rejected", "compile_error", "timeout", "crashed", "unverifiable_here", "harness_error", "outside_envelope"]
STEP_NAMES = ("static", "compile", "correctness", "timing", "cost")


class StepResult(BaseModel):
    """What one harness step found. ``ok=None`` means the step did not run."""

    model_config = ConfigDict(frozen=True)

    name: str
    ok: Optional[bool] = None
    seconds: float = 0.0
    detail: str = ""


class CaseResult(BaseModel):
    """Correctness of one suite case (all outputs)."""

    model_config = ConfigDict(frozen=True)

    index: int
    scale: str
    seed: int
    distribution: str
    ok: bool
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    note: str = ""
    #: ``<scale>-s<seed>-<distribution>``: ``mk eval TASK CANDIDATE --case KEY`` runs this case again
    key: str = ""


class TimingResult(BaseModel):
    """Wall-clock timing of candidate and reference, interleaved in one process.

    ``measured=False`` always carries the reason; no estimate ever stands in
    for a measurement."""

    model_config = ConfigDict(frozen=True)

    measured: bool
    reason: str = ""
    scale: Optional[str] = None
    runs: int = 0
    input_sets: int = 0
    candidate_median_s: Optional[float] = None
    reference_median_s: Optional[float] = None
    candidate_iqr_s: Optional[float] = None
    reference_iqr_s: Optional[float] = None
    candidate_min_s: Optional[float] = None
    candidate_max_s: Optional[float] = None
    reference_min_s: Optional[float] = None
    reference_max_s: Optional[float] = None
    speedup: Optional[float] = None


class CostResult(BaseModel):
    """XLA cost analysis (compiled for CPU) and, where known, the roofline floor."""

    model_config = ConfigDict(frozen=True)

    candidate_flops: Optional[float] = None
    candidate_bytes: Optional[float] = None
    reference_flops: Optional[float] = None
    reference_bytes: Optional[float] = None
    roofline_floor_s: Optional[float] = None
    source: str = "xla-cpu"
    note: str = ""


#: what separates a verdict's reason from the whole error in :meth:`EvalResult.fix_text`
WHOLE_ERROR = "\n\nThe whole error:"


def reason_of(fix_text: str) -> str:
    """The verdict's one-line reason of a :meth:`EvalResult.fix_text` (the line of an error text that says what went
    wrong, when given some other text: its last non-empty line)."""
    head = (fix_text or "").split(WHOLE_ERROR)[0].strip()
    lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
    return lines[-1] if len(lines) > 1 else head


class EvalResult(BaseModel):
    """The judge's verdict on one candidate for one task and target."""

    status: Status
    reason: str
    #: for an author's fixer: the whole error behind a ``compile_error`` (the full message and the candidate's own
    #: traceback lines); the candidate's process's words, never part of the verdict. "" when there is none.
    error: str = ""
    task: str
    target: str
    scales: list[str] = Field(default_factory=list)
    suite_hash: str = ""
    candidate_digest: str = ""
    steps: list[StepResult] = Field(default_factory=list)
    cases: list[CaseResult] = Field(default_factory=list)
    timing: Optional[TimingResult] = None
    cost: Optional[CostResult] = None
    flags: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    #: how the candidate's process was contained (``bwrap: ...``, ``unshare: ...``, ``none: ...``)
    isolation: str = ""
    #: where the compared outputs came from: ``device program`` (the exported target program on the device),
    #: ``exported cpu program`` (the same trace, kernels in Pallas's HLO interpreter, run by the judge's runner),
    #: or ``tracer interpreter`` (a kernel only the TPU interpreter runs, executed in the isolated tracer)
    verified_by: str = ""
    #: what was verified: per scale the input shapes/dtypes and statics, the tolerance and the case count
    envelope: dict = Field(default_factory=dict)
    #: the key of the case a failing verdict failed on (``mk eval ... --case KEY`` reproduces it), else ""
    failed_case: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    def fix_text(self) -> str:
        """What an author's fixer is sent: the verdict's reason, then the whole error behind it when there is one."""
        if not self.error or self.error.strip() in self.reason:
            return self.reason
        return f"{self.reason}{WHOLE_ERROR}\n{self.error}"

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing and self.timing.measured else None

    def step(self, name: str) -> StepResult | None:
        return next((s for s in self.steps if s.name == name), None)
