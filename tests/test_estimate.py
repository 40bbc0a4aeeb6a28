"""The speed estimate without the device (mk/harness/estimate.py) at its seams: what it refuses to estimate, the
deadline it compiles under, and that each failure is paid once (a compile fake; the real compiler is in
tests/test_chip_compile.py)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from mk.chips import get_chip
from mk.harness import chipcheck, estimate
from mk.harness.results import CompileResult, KernelFigures
from mk.hardware import get_spec
from mk.task import ArgSpec, Scale, Task

pytestmark = pytest.mark.unit

TASK = Task("est_scale", lambda x: x * 2.0, (ArgSpec("x", ("rows", 1024), "float32"),),
            {"ci": Scale("ci", {"rows": 16}), "full": Scale("full", {"rows": 8192})})
V6E = get_spec("v6e")


def _compiled(cycles: int = 40_000, **update) -> CompileResult:
    base = CompileResult(chip="v6e", scale="full", ok=True, kernels=[KernelFigures(name="k", estimated_cycles=cycles)],
                         io_bytes=2 * 8192 * 1024 * 4, kernel_bytes=2 * 8192 * 1024 * 4)
    return base.model_copy(update=update)


def _xla(flops: float, nbytes: float, **update) -> CompileResult:
    """A program of XLA alone (the reference): no kernels, XLA's own counts."""
    return CompileResult(chip="v6e", scale="full", ok=True, flops=flops, bytes_accessed=nbytes,
                         io_bytes=2 * 8192 * 1024 * 4).model_copy(update=update)


def test_a_program_with_an_xla_loop_has_no_estimate():
    # libtpu's schedule and XLA's byte count give a while body once: 100 trips would read as one
    with pytest.raises(estimate.NoEstimate, match="XLA loop"):
        estimate.program_seconds(_compiled(loops=1), V6E)
    with pytest.raises(estimate.NoEstimate, match="did not compile"):
        estimate.program_seconds(_compiled(ok=False, error="RESOURCE_EXHAUSTED"), V6E)
    with pytest.raises(estimate.NoEstimate, match="no figures"):
        estimate.program_seconds(_compiled(kernels=[], io_bytes=0, kernel_bytes=None), V6E)
    with pytest.raises(estimate.NoEstimate, match="no static schedule for kernel k"):
        estimate.program_seconds(_compiled(cycles=0, flops=1e12), V6E)


def test_the_model_adds_what_the_kernels_and_xla_move_and_schedules_both():
    seconds, bound = estimate.program_seconds(_compiled(), V6E)
    assert bound == "memory" and seconds == pytest.approx(2 * 8192 * 1024 * 4 / V6E.hbm_bandwidth)
    # the kernel's blocks and XLA's work beside it add up (XLA counts nothing for a custom call): 64 MiB more
    more, _ = estimate.program_seconds(_compiled(bytes_accessed=float(64 << 20)), V6E)
    assert more == pytest.approx(seconds + (64 << 20) / V6E.hbm_bandwidth)
    # never less than the arguments and results once
    assert estimate.program_seconds(_compiled(kernel_bytes=1), V6E)[0] == pytest.approx(seconds)
    # traffic it cannot bound, or did not read, is no estimate
    with pytest.raises(estimate.NoEstimate, match="cannot be bounded: kernel 1: operand 0 has no blocks"):
        estimate.program_seconds(_compiled(traffic_unknown=["kernel 1: operand 0 has no blocks (pl.ANY)"]), V6E)
    with pytest.raises(estimate.NoEstimate, match="not read"):
        estimate.program_seconds(_compiled(kernel_bytes=None), V6E)
    # XLA's work beside the kernels, scheduled in the same compile, at the same rate (not at the MXU peak)
    beside, _ = estimate.program_seconds(_compiled(cycles=10_000_000, xla_estimated_cycles=10_000_000, flops=1.0), V6E)
    assert beside == pytest.approx(20_000_000 / V6E.static_schedule_hz)
    # XLA alone: its roofline (flops at the bf16 peak, bytes over the bandwidth)
    xla, bound = estimate.program_seconds(_xla(918e12 * 1e-3, 1e6), V6E)
    assert bound == "compute" and xla == pytest.approx(1e-3)


@pytest.fixture
def compiles(monkeypatch):
    """chipcheck.compile_scales replaced: each call recorded; programs named b"bad..." do not finish; b"ref..." is a
    program of XLA alone (400,000 cycles' worth of flops at the peak), any other one has a Pallas kernel."""
    calls = []

    def fake(chip, programs, judged, *, memory_mb, deadline_s, strict, estimate):
        ((scale, blob),) = programs.items()
        calls.append((blob, deadline_s, memory_mb, estimate))
        assert not strict
        if blob.startswith(b"bad"):
            return [], [f"the v6e compile at scale {scale} did not finish: ran past its limit"]
        if blob.startswith(b"ref"):
            return [_xla(400_000 / V6E.static_schedule_hz * 918e12, 1e6)], []
        return [_compiled(cycles=40_000 if estimate else None)], []

    monkeypatch.setattr(chipcheck, "compile_scales", fake)
    monkeypatch.setattr(estimate, "_baselines", {})
    monkeypatch.setattr(estimate, "_refused", {})
    return calls


def _verdict(program: bytes, reference: bytes, compiled_s: dict | None = None):
    asked = []

    def ref(scale):
        asked.append(scale)
        return reference

    found = None
    try:
        found = estimate.for_verdict(TASK, {"ci": b"small", "full": program}, get_chip("v6e"), dict(TASK.scales),
                                     reference=ref, memory_mb=4096, compiled_s=compiled_s or {})
    except estimate.NoEstimate as exc:
        found = exc
    return found, asked


def test_at_the_largest_size_within_a_few_times_the_verdicts_own_compile(compiles):
    found, asked = _verdict(b"kernel", b"ref", {"full": 30.0})
    expected = (400_000 / V6E.static_schedule_hz) / (2 * 8192 * 1024 * 4 / V6E.hbm_bandwidth)  # compute / memory
    assert found.scale == "full" and found.estimated_speedup == pytest.approx(expected) and asked == ["full"]
    # the candidate as the verdict compiled it, then with the schedule (it has a kernel); the reference as compiled
    assert [(c[0], c[3]) for c in compiles] == [(b"kernel", False), (b"kernel", True), (b"ref", False)]
    assert {c[1:3] for c in compiles} == {(4 * 30.0, 4096)}  # the user's memory limit, not a default
    compiles.clear()
    _verdict(b"kernel2", b"ref")  # the reference is compiled once per task, size and chip
    assert [c[0] for c in compiles] == [b"kernel2", b"kernel2"] and compiles[0][1] == estimate.MIN_DEADLINE_S


def test_a_candidate_that_does_not_compile_for_the_estimate_is_tried_once_and_the_reference_never(compiles):
    found, asked = _verdict(b"bad kernel", b"ref")
    assert isinstance(found, estimate.NoEstimate) and "the candidate's program did not compile" in str(found)
    assert asked == [] and len(compiles) == 1
    again, _ = _verdict(b"bad kernel", b"ref")
    assert str(again) == str(found) and len(compiles) == 1  # remembered: a tuning run pays it once


def test_a_reference_that_does_not_compile_is_tried_once_per_task_and_named(compiles):
    found, _ = _verdict(b"kernel", b"bad ref")
    assert isinstance(found, estimate.NoEstimate) and "the reference's program did not compile" in str(found)
    compiles.clear()
    other, asked = _verdict(b"kernel3", b"bad ref")
    assert "the reference's program" in str(other) and {c[0] for c in compiles} == {b"kernel3"} and asked == []


def test_the_estimate_is_never_called_a_speedup():
    fields = set(estimate.SpeedEstimate.model_fields)
    assert "speedup" not in fields and "estimated_speedup" in fields
    e = estimate.speedup(_compiled(), _xla(1e15, 1e6), V6E)
    assert e.label().startswith("estimated ") and e.label().endswith("an estimate, not a measurement")
    assert jnp.isfinite(e.estimated_speedup)
