"""Speed without the device: the chip compiler's own figures, as an estimate labelled as one (issue 23).

A compiled TPU program's time is estimated as the larger of

- compute: libtpu's static-schedule cycles of its Pallas kernels (:class:`~mk.harness.results.KernelFigures`) and of
  XLA's work beside them, at the chip's ``static_schedule_hz`` (data/hardware.json: the rate at which libtpu's
  estimate of XLA's own large bf16 matmul would run at the published peak, measured by ``python -m
  evals.estimate_sanity``); a program of XLA alone: its flops at the chip's bfloat16 peak (its roofline);
- memory: the bytes it moves over the chip's HBM bandwidth, never less than its arguments and results once: XLA's
  count for its own work (it counts nothing for a custom call) plus each Pallas kernel's blocks over its grid
  (:mod:`mk.harness.mosaic_traffic`: a matmul's row block read once per column block included; a window whose index
  cannot be evaluated at its upper bound). Traffic that cannot be bounded (``pl.ANY`` DMAs, a grid or kernel loop
  sized at run time, which the static schedule also counts a fixed number of times) gives no estimate.

So a program of XLA alone, the reference above all, is estimated at its roofline: a lower bound on its time, which
keeps an estimated speedup over it conservative, and needs only the verdict's own compile (libtpu's static schedule
dump makes a large XLA program's compile run for minutes and take gigabytes: softmax at 16384 x 8192, 143 s and
12.8 GB against 0.75 s). Only a program with Pallas kernels compiles again with the dump, in an estimate worker.

A program with an XLA loop (``while``: a ``fori_loop`` or ``scan`` around kernels) has no estimate: the schedule and
XLA's counts give a loop's body once, whatever its trip count (a Pallas kernel's own loops are scheduled with their
trips). The static schedule does not model HBM stalls (``evals/results/estimate_sanity.md``), which is why the
memory side is there. The speedup is the reference's program, compiled for the same chip at the same size, over the
candidate's. Nothing here ran on a chip: the estimate never replaces a measurement, is never a verdict's
``speedup`` and never counts in ``fast_p``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from mk.harness.results import CompileResult, SpeedEstimate

log = logging.getLogger(__name__)


def model_words(spec: Any) -> str:
    return (f"Pallas kernels by libtpu's static schedule at {spec.static_schedule_hz / 1e9:.2f} GHz, XLA alone at its "
            f"roofline, against the bytes moved (each kernel's blocks over its grid) over {spec.hbm_bandwidth / 1e12:.2f} "
            "TB/s of HBM, the larger")


class NoEstimate(Exception):
    """Why a verdict has no estimate (its flag's words)."""


def program_seconds(result: CompileResult, spec: Any) -> tuple[float, str]:
    """(estimated seconds, ``compute`` or ``memory``) of one compiled program; raises :class:`NoEstimate` without
    the figures, for a program with an XLA loop, or with kernel traffic that cannot be bounded."""
    from mk.hardware import compute_seconds, memory_seconds

    if not result.ok:
        raise NoEstimate(f"it did not compile ({result.error[:200]})")
    if result.loops:
        raise NoEstimate(f"it has {result.loops} XLA loop(s), whose body the static schedule counts once")
    if not spec.static_schedule_hz:
        raise NoEstimate(f"no static-schedule rate is known for {spec.name}")
    kernels = [k for k in result.kernels if k.kind == "pallas"]
    unscheduled = [k.name for k in kernels if not k.estimated_cycles]
    if unscheduled:
        raise NoEstimate(f"the compiler gave no static schedule for kernel {unscheduled[0]}")
    if kernels and result.kernel_bytes is None:
        raise NoEstimate("its kernels' memory traffic was not read")
    if result.traffic_unknown:
        raise NoEstimate(f"its kernels' memory traffic cannot be bounded: {result.traffic_unknown[0]}")
    compute = sum(k.estimated_cycles or 0 for k in kernels) / spec.static_schedule_hz
    if kernels and result.xla_estimated_cycles is not None:  # scheduled beside the kernels: XLA's work at the same rate
        compute += result.xla_estimated_cycles / spec.static_schedule_hz
    else:  # XLA alone (the reference): at its roofline, a lower bound on its time
        compute += compute_seconds(result.flops or 0.0, spec, "bfloat16")
    moved = max((result.bytes_accessed or 0.0) + (result.kernel_bytes or 0), float(result.io_bytes or 0))
    if compute <= 0 and moved <= 0:
        raise NoEstimate("the compiler gave no figures for it")
    memory = memory_seconds(moved, spec)
    return (compute, "compute") if compute >= memory else (memory, "memory")


def speedup(kernel: CompileResult, baseline: CompileResult, spec: Any) -> SpeedEstimate:
    """The estimated speedup of ``kernel``'s program over ``baseline``'s (the reference), both compiled for ``spec``
    at the same scale; raises :class:`NoEstimate` when either lacks the figures."""
    k = _seconds("the candidate's program", kernel, spec)
    b = _seconds("the reference's program", baseline, spec)
    return SpeedEstimate(chip=spec.name, scale=kernel.scale, kernel_s=k[0], kernel_bound=k[1], baseline_s=b[0],
                         baseline_bound=b[1], estimated_speedup=b[0] / k[0], model=model_words(spec))


def _seconds(what: str, result: CompileResult, spec: Any) -> tuple[float, str]:
    try:
        found = program_seconds(result, spec)
    except NoEstimate as exc:
        raise NoEstimate(f"{what}: {exc}") from None
    if found[0] <= 0:
        raise NoEstimate(f"{what}: no time")
    return found


#: the reference's compiled program (or why it has none) per (task fingerprint, scale, chip): tuning judges one task
#: many times; and why a candidate's program has no estimate, per (program digest, chip): each is tried once
_baselines: dict[tuple[str, str, str], CompileResult | str] = {}
_refused: dict[tuple[str, str], str] = {}

#: an estimate compile is given this many times the verdict's own compile of the program (at least MIN_DEADLINE_S):
#: libtpu's schedule dump can make a compile the verdict's worker finished in seconds run for minutes
DEADLINE_FACTOR = 4.0
MIN_DEADLINE_S = 60.0


def for_verdict(task: Any, programs: dict[str, bytes], chip: Any, scales: dict[str, Any], *,
                reference: Callable[[str], bytes], memory_mb: int, compiled_s: dict[str, float]) -> SpeedEstimate:
    """The estimate for a verdict: at the largest of ``scales`` (name -> Scale: the task's judged sizes, the declared
    sizes the verdict claims or compiled, such as ``full``) with a device program in ``programs`` (the exported
    target programs the verdict's compile stage compiled), that program against the reference's
    (``reference(scale)``: the judge's own export, as timed on a device). A program with Pallas kernels compiles again
    in an estimate worker (libtpu's static schedule on: never the verdict's own worker), within
    :data:`DEADLINE_FACTOR` times the verdict's compile seconds (``compiled_s``); one of XLA alone needs only the
    compile the verdict makes (its roofline). Raises :class:`NoEstimate` with the reason; a failure is remembered."""
    import hashlib
    import math

    import numpy as np

    from mk.harness import chipcheck
    from mk.hardware import get_spec

    spec = get_spec(chip.name)
    if not spec.static_schedule_hz:
        raise NoEstimate(f"no static-schedule rate is known for {chip.name}")
    names = [s for s in scales if s in programs]
    if not names:
        raise NoEstimate("no device program to estimate")

    def size(name: str) -> int:
        t = task.with_scales({name: scales[name]})
        return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in t.arg_structs(name))

    scale = max(names, key=size)
    deadline = min(chipcheck.COMPILE_S, max(MIN_DEADLINE_S, DEADLINE_FACTOR * compiled_s.get(scale, 0.0)))

    def compiled(what: str, blob: bytes, schedule: bool) -> CompileResult:
        """``schedule``: in an estimate worker (libtpu's static schedule of each Pallas kernel); else as the verdict
        compiles (cached per program: the verdict's own compile of it is reused)."""
        results, flags = chipcheck.compile_scales(chip, {scale: blob}, set(), memory_mb=memory_mb, deadline_s=deadline,
                                                  strict=False, estimate=schedule)
        if not results:
            raise NoEstimate(f"{what} did not compile for it within {deadline:.0f} s: {(flags or ['no result'])[-1]}")
        return results[0]

    mine = (hashlib.sha256(programs[scale]).hexdigest(), chip.name)
    if mine in _refused:
        raise NoEstimate(_refused[mine])
    try:
        kernel = compiled("the candidate's program", programs[scale], schedule=False)
        if any(k.kind == "pallas" for k in kernel.kernels):  # its kernels need libtpu's schedule
            kernel = compiled("the candidate's program", programs[scale], schedule=True)
        _seconds("the candidate's program", kernel, spec)  # before the reference is compiled at all
    except NoEstimate as exc:
        _refused[mine] = str(exc)
        raise
    at = task.with_scales({scale: scales[scale]})
    key = (at.fingerprint(), scale, chip.name)
    baseline = _baselines.get(key)
    if baseline is None:
        try:
            baseline = compiled("the reference's program", reference(scale), schedule=False)
        except NoEstimate as exc:
            baseline = str(exc)
        _baselines[key] = baseline
    if isinstance(baseline, str):
        raise NoEstimate(baseline)
    return speedup(kernel, baseline, spec)
