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


#: how a screened result's reason begins (a tuning trial), and its flag: what it did not check
SCREENED = "screened (a tuning trial, not a verdict to keep)"
SCREEN_FLAG = ("screened for tuning: the TPU-interpreter checks, ablation, the backward check and fresh sizes did not run; "
               "the tuner judges its winner whole before keeping it")


def trial_status(status: str, reason: str) -> str:
    """A verdict's status as mk shows it: a screened tuning trial that passed "passes the screen", never "correct"
    (it was not judged whole and is not a verdict to keep)."""
    return "passes the screen" if status == "correct" and reason.startswith(SCREENED) else status


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


class KernelFigures(BaseModel):
    """What the chip's compiler reported for one kernel of a compiled program (a Pallas kernel, or on a GPU an XLA
    fusion): TPU scoped VMEM; GPU shared memory, registers, spills, grid and threads (``ptxas -v`` and XLA's thunks)."""

    model_config = ConfigDict(frozen=True)

    name: str
    #: ``pallas`` (the candidate's kernel) or ``xla`` (a kernel XLA generated around it)
    kind: Literal["pallas", "xla"] = "pallas"
    scoped_vmem_bytes: Optional[int] = None
    shared_memory_bytes: Optional[int] = None
    registers: Optional[int] = None
    spill_store_bytes: Optional[int] = None
    spill_load_bytes: Optional[int] = None
    stack_bytes: Optional[int] = None
    grid: list[int] = Field(default_factory=list)
    threads: list[int] = Field(default_factory=list)
    #: TPU: libtpu's static schedule of the kernel, in cycles. An ESTIMATE of the compiler's, not a measurement
    estimated_cycles: Optional[int] = None


class CompileResult(BaseModel):
    """The real compiler for one chip on the exported device program of one scale (compiled here, without the chip)."""

    model_config = ConfigDict(frozen=True)

    chip: str
    scale: str
    ok: bool
    #: whether the scale's cases ran (a failure there is ``compile_error``); False for a declared scale compiled only
    judged: bool = True
    seconds: float = 0.0
    #: the compiler's own message when it refused the program (which buffer, how many bytes, which limit)
    error: str = ""
    kernels: list[KernelFigures] = Field(default_factory=list)
    code_bytes: Optional[int] = None
    temp_bytes: Optional[int] = None
    #: the chip's limits the figures are measured against (``scoped_vmem_bytes``, ``shared_memory_per_block_bytes``...)
    limits: dict[str, int] = Field(default_factory=dict)
    #: the compilers' versions (the cache key's too)
    compiler: str = ""
    #: TPU: libtpu's static schedule of the program's XLA fusions and copies outside the Pallas kernels (an estimate)
    xla_estimated_cycles: Optional[int] = None
    #: XLA's count of the bytes the program reads and writes in HBM, outside its Pallas kernels (it counts none of theirs)
    bytes_accessed: Optional[float] = None
    #: XLA's count of the program's flops, outside its Pallas kernels
    flops: Optional[float] = None
    #: the program's arguments and results, in bytes: what any implementation moves at least once
    io_bytes: Optional[int] = None
    #: TPU, for the estimate: the bytes its Pallas kernels' pipelined blocks move (from their windows over the grid:
    #: :mod:`mk.harness.mosaic_traffic`; XLA's ``bytes_accessed`` counts none of them), and what could not be counted
    kernel_bytes: Optional[int] = None
    traffic_unknown: list[str] = Field(default_factory=list)
    #: XLA ``while`` loops in the compiled program (their bodies appear once in the schedule and the byte count)
    loops: Optional[int] = None

    @property
    def estimated_cycles(self) -> int:
        """libtpu's static schedule of the whole program: its Pallas kernels and XLA's own fusions (an estimate)."""
        return sum(k.estimated_cycles or 0 for k in self.kernels) + (self.xla_estimated_cycles or 0)

    @property
    def spill_bytes(self) -> int:
        return sum((k.spill_store_bytes or 0) + (k.spill_load_bytes or 0) for k in self.kernels if k.kind == "pallas")

    def summary(self) -> str:
        """One line: what the compiler reported, or why it refused."""
        if not self.ok:
            return f"{self.chip} at {self.scale}: does not compile ({self.error})"
        parts = []
        for k in self.kernels:
            if k.kind != "pallas":
                continue
            if k.scoped_vmem_bytes is not None:
                limit = self.limits.get("scoped_vmem_bytes")
                parts.append(f"{k.name} {_mib(k.scoped_vmem_bytes)} VMEM" + (f" of {_mib(limit)}" if limit else "")
                             + (f", {k.estimated_cycles:,} cycles estimated by libtpu's static schedule"
                                if k.estimated_cycles is not None else ""))
            elif k.shared_memory_bytes is not None:
                limit = self.limits.get("shared_memory_per_block_bytes")
                spill = (k.spill_store_bytes or 0) + (k.spill_load_bytes or 0)
                parts.append(f"{k.name} {_kib(k.shared_memory_bytes)} shared" + (f" of {_kib(limit)}" if limit else "")
                             + (f", {k.registers} registers" if k.registers is not None else "")
                             + (f", {spill} B spilled" if spill else ""))
        return f"{self.chip} at {self.scale}: " + ("; ".join(parts) if parts else "compiled")


def compile_lines(compiled: list[CompileResult]) -> list[str]:
    """One line per chip: the largest kernel's figure at each scale (fresh sizes folded into one entry), or why a scale
    does not compile. For a kernel file's header and reports."""
    chips: dict[str, list[CompileResult]] = {}
    for c in compiled:
        chips.setdefault(c.chip, []).append(c)
    lines = []
    for chip, results in chips.items():
        limits = results[0].limits
        if "scoped_vmem_bytes" in limits:
            head = f"{chip} (scoped VMEM limit {_mib(limits['scoped_vmem_bytes'])}):"
        else:
            head = f"{chip} (shared memory limit {_kib(limits.get('shared_memory_per_block_bytes', 0))} a block):"
        parts, fresh = [], []
        for r in results:
            pallas = [k for k in r.kernels if k.kind == "pallas"]
            if not r.ok:
                figure = f"does not compile ({r.error[:160]})"
            elif pallas and pallas[0].scoped_vmem_bytes is not None:
                figure = _mib(max(k.scoped_vmem_bytes or 0 for k in pallas))
            elif pallas:
                top = max(pallas, key=lambda k: k.shared_memory_bytes or 0)
                spill = sum((k.spill_store_bytes or 0) + (k.spill_load_bytes or 0) for k in pallas)
                figure = (f"{_kib(top.shared_memory_bytes or 0)}, {max(k.registers or 0 for k in pallas)} registers"
                          + (f", {spill} B spilled" if spill else ""))
            else:
                figure = "compiled"
            (fresh if r.scale.startswith("size-") else parts).append((r.scale, figure))
        words = [f"{scale} {figure}" for scale, figure in parts]
        if fresh:
            words.append(f"{len(fresh)} fresh sizes: " + ", ".join(f for _, f in fresh))
        lines.append(f"{head} " + "; ".join(words))
    return lines


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _kib(n: int) -> str:
    return f"{n / 2**10:.1f} KiB"


#: what separates a verdict's reason from the whole error in :meth:`EvalResult.fix_text`
WHOLE_ERROR = "\n\nThe whole error:"


def reason_of(fix_text: str) -> str:
    """The verdict's one-line reason of a :meth:`EvalResult.fix_text` (the line of an error text that says what went
    wrong, when given some other text: its last non-empty line)."""
    head = (fix_text or "").split(WHOLE_ERROR)[0].strip()
    lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
    return lines[-1] if len(lines) > 1 else head


class SpeedEstimate(BaseModel):
    """An ESTIMATED speedup over XLA without the device (:mod:`mk.harness.estimate`): never a measurement, never a
    verdict's ``speedup``, never counted in ``fast_p``."""

    model_config = ConfigDict(frozen=True)

    chip: str
    scale: str
    kernel_s: float
    kernel_bound: Literal["compute", "memory"]
    baseline_s: float
    baseline_bound: Literal["compute", "memory"]
    #: the reference's estimated time over the candidate's (named so that no reader takes it for a measured speedup)
    estimated_speedup: float
    #: how it was estimated, in words (the label carries it everywhere the estimate appears)
    model: str
    #: the verdict judged (or claims) this scale; False: a declared size the candidate's program was only compiled
    #: at (the size the user runs, where tuning ranks configs), not judged there
    judged: bool = True

    def label(self) -> str:
        where = self.scale if self.judged else f"{self.scale} (compiled there, not judged there)"
        return (f"estimated {self.estimated_speedup:.2f}x over XLA on {self.chip} at {where} (kernel "
                f"{self.kernel_s * 1e6:.1f} us, {self.kernel_bound}-bound; XLA {self.baseline_s * 1e6:.1f} us, "
                f"{self.baseline_bound}-bound; {self.model}); an estimate, not a measurement")


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
    #: which check compiled the device program: ``compiled for v6e (libtpu ...)`` or ``lowered only: <why>``
    compile_check: str = ""
    #: the chip's compiler on the device program, per scale (judged scales and declared scales compiled only)
    compiled: list[CompileResult] = Field(default_factory=list)
    #: declared sizes the cases did not run that the verdict claims (envelope points, by scale name): compiled for the
    #: chip, and their program runs the code a judged size ran (:func:`mk.harness.program.paths_covered`)
    covered: dict = Field(default_factory=dict)
    #: without the device: the compiler's estimate of the speedup over XLA (labelled so), else None
    estimate: Optional[SpeedEstimate] = None

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
