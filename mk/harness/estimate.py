"""Speed without the device: the chip compiler's own estimate, labelled as one (issue 23's first model).

A compiled TPU program's time is estimated as the larger of

- compute: libtpu's static-schedule cycles of its Pallas kernels and XLA's fusions
  (:class:`~mk.harness.results.CompileResult`), at the chip's ``static_schedule_hz`` (data/hardware.json: the rate
  at which libtpu's estimate of XLA's own large bf16 matmul would run at the published peak, measured by
  ``python -m evals.estimate_sanity``);
- memory: the bytes it moves over the chip's HBM bandwidth. XLA counts the bytes of its own programs; it cannot
  count a Pallas kernel's, so for those the program's arguments and results once each (a lower bound: blocks
  fetched again are not counted yet).

The static schedule does not model HBM stalls (``evals/results/estimate_sanity.md``: an elementwise kernel's
schedule is about half its HBM time), which is why the memory side is there. The speedup is the reference's
program, compiled for the same chip at the same size, over the candidate's. Nothing here ran on a chip: the
estimate never replaces a measurement, is never a verdict's ``speedup`` and never counts in ``fast_p``.
"""

from __future__ import annotations

import logging
from typing import Any

from mk.harness.results import CompileResult, SpeedEstimate

log = logging.getLogger(__name__)


def model_words(spec: Any) -> str:
    return (f"libtpu's static schedule at {spec.static_schedule_hz / 1e9:.2f} GHz against the bytes moved over "
            f"{spec.hbm_bandwidth / 1e12:.2f} TB/s of HBM, the larger")


def program_seconds(result: CompileResult, spec: Any) -> tuple[float, str] | None:
    """(estimated seconds, ``compute`` or ``memory``) of one compiled program, or None without the figures."""
    if not result.ok or not spec.static_schedule_hz:
        return None
    cycles = sum(k.estimated_cycles or 0 for k in result.kernels) + (result.xla_estimated_cycles or 0)
    if not cycles:
        return None
    compute = cycles / spec.static_schedule_hz
    moved = result.bytes_accessed or result.io_bytes or 0
    memory = moved / spec.hbm_bandwidth
    return (compute, "compute") if compute >= memory else (memory, "memory")


def speedup(kernel: CompileResult, baseline: CompileResult, spec: Any) -> SpeedEstimate | None:
    """The estimated speedup of ``kernel``'s program over ``baseline``'s (the reference), both compiled for ``spec``
    at the same scale; None when either lacks the figures."""
    k, b = program_seconds(kernel, spec), program_seconds(baseline, spec)
    if k is None or b is None or k[0] <= 0:
        return None
    return SpeedEstimate(chip=spec.name, scale=kernel.scale, kernel_s=k[0], kernel_bound=k[1], baseline_s=b[0],
                         baseline_bound=b[1], speedup=b[0] / k[0], model=model_words(spec))


#: the reference's compiled program per (task fingerprint, scale, chip): tuning judges one task many times
_baselines: dict[tuple[str, str, str], CompileResult] = {}


def for_verdict(task: Any, programs: dict[str, bytes], chip: Any, scales: dict[str, Any]) -> SpeedEstimate | None:
    """The estimate for a verdict: at the largest of ``scales`` (name -> Scale: the task's judged sizes and the
    declared sizes the verdict claims, such as ``full``) with a device program in ``programs`` (the exported target
    programs the verdict's compile stage compiled), that program against the reference's, which this (trusted)
    process exports. Both compile again in an estimate worker (libtpu's static schedule on: never the verdict's own
    worker). Raises what a compile raises; the caller makes that a flag."""
    import math

    import numpy as np

    from mk.harness import chipcheck
    from mk.harness.process import default_memory_limit_mb
    from mk.hardware import get_spec

    spec = get_spec(chip.name)
    if not spec.static_schedule_hz:
        return None
    names = [s for s in scales if s in programs]
    if not names:
        return None

    def size(name: str) -> int:
        t = task.with_scales({name: scales[name]})
        return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in t.arg_structs(name))

    scale = max(names, key=size)
    results, flags = chipcheck.compile_scales(chip, {scale: programs[scale]}, set(), memory_mb=default_memory_limit_mb(),
                                              strict=False, estimate=True)
    if not results:
        raise chipcheck.CompileRefused("timeout", (flags or ["the estimate's compile did not finish"])[-1])
    at = task.with_scales({scale: scales[scale]})
    key = (at.fingerprint(), scale, chip.name)
    baseline = _baselines.get(key)
    if baseline is None:
        baseline = chipcheck.compile_function(at.bind(at.reference, scale), *at.arg_structs(scale), chip=chip.name,
                                              scale=scale, estimate=True)
        _baselines[key] = baseline
    return speedup(results[0], baseline, spec)
