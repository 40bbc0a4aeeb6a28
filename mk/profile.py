"""Profiles: what a measured (or unmeasurable) candidate tells the next plan.

A :class:`ProfileReport` joins the judge's timing, the XLA cost analysis, the
task analysis (the roofline floor for the target's hardware) and, where a
device exists, the heaviest ops from a ``jax.profiler`` trace. Numbers that
could not be measured stay ``None`` with the reason; nothing is estimated in
their place. The ProfileAnalyst sub-agent (or the offline author) reads
:meth:`ProfileReport.summary`.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, Field

from mk.errors import MkError, TaskError
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
            why = self.reason.removeprefix("not measured").lstrip(":; ")  # the judge's reasons start with those words
            lines.append("time not measured" + (f": {why}" if why else ""))
        if self.flops is not None:
            lines.append(f"work: {self.flops:.3g} FLOP, {self.bytes:.3g} bytes; {self.bound or '?'}-bound")
        if self.floor_s is not None:
            lines.append(f"roofline floor {self.floor_s * 1e3:.4f} ms" + (
                f"; achieved {self.roofline_fraction:.1%} of the roofline" if self.roofline_fraction is not None else ""))
        for op in self.heaviest_ops[:5]:
            lines.append(f"  {op.name}: {op.seconds * 1e3:.3f} ms ({op.share:.0%})")
        lines.extend(self.notes)
        return "\n".join(lines)


def profile(task: Task, result: EvalResult, target: str, *, scale: str | None = None, candidate: Any = None,
            trace: bool | None = None) -> ProfileReport:
    """Build the report for a judged candidate.

    With ``candidate`` (its source or a :class:`~mk.candidate.Candidate`) and a device of the target here,
    a correct candidate is also run a few times under ``jax.profiler`` in a separate process and the trace's
    device-side op times become :attr:`ProfileReport.heaviest_ops`. ``trace=True`` forces that (also on the
    ``cpu`` target), ``False`` turns it off. Without a device nothing runs again."""
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
    if trace is None:
        trace = candidate is not None and not tgt.host and tgt.device_present()
    if trace and candidate is not None and result.status == "correct":
        try:
            report.heaviest_ops = device_trace(task, candidate, target, scale=scale or (result.scales[-1] if result.scales else None))
        except Exception as exc:  # the trace is advisory: say why it is missing
            report.notes.append(f"device trace unavailable: {type(exc).__name__}: {exc}")
    if result.cost and result.cost.candidate_flops is not None:
        report.notes.append(f"XLA cost of the candidate (compiled for the CPU): {result.cost.candidate_flops:.3g} FLOP, "
                            f"{result.cost.candidate_bytes or 0:.3g} bytes")
    return report


# --- device traces --------------------------------------------------------------
#: trace lines that are whole programs or steps, not ops
_NOT_OPS = ("XLA Modules", "Steps", "XLA TraceMe", "Framework Ops", "Source code")


def find_trace(log_dir: str | Path) -> Path | None:
    """The Chrome-format trace ``jax.profiler.trace(..., create_perfetto_trace=True)`` wrote under ``log_dir``."""
    found = sorted(Path(log_dir).glob("plugins/profile/*/perfetto_trace.json.gz")) or sorted(
        Path(log_dir).glob("plugins/profile/*/*.trace.json.gz"))
    return found[-1] if found else None


def _events(trace: str | Path | dict | list) -> list[dict]:
    if isinstance(trace, (str, Path)):
        with gzip.open(trace, "rt") if str(trace).endswith(".gz") else open(trace) as f:
            trace = json.load(f)
    return list(trace.get("traceEvents", []) if isinstance(trace, dict) else trace)


def parse_trace(trace: str | Path | dict | list, *, top: int = 10) -> list[OpTime]:
    """Device-side op times from a Chrome-format profiler trace, heaviest first.

    Ops are complete events (``ph == "X"``) that name an HLO op (``args.hlo_op``), or, on ``/device:``
    processes, any event off the module/step lines. Device processes win when present (GPU/TPU); on a
    CPU the XLA ops run on host threads and are taken from there. ``share`` is of the summed op time."""
    events = _events(trace)
    procs = {e["pid"]: e.get("args", {}).get("name", "") for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e.get("tid")): e.get("args", {}).get("name", "") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device = {pid for pid, name in procs.items() if name.startswith("/device:")}
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") != "X" or not e.get("dur") or str(e.get("name", "")).startswith("end: "):
            continue
        pid, args = e.get("pid"), e.get("args") or {}
        if device and pid not in device:
            continue
        line = threads.get((pid, e.get("tid")), "")
        if "hlo_op" in args or (pid in device and not any(line.startswith(n) for n in _NOT_OPS)):
            totals[str(args.get("hlo_op") or e["name"])] += float(e["dur"]) * 1e-6  # trace times are in microseconds
    whole = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    return [OpTime(name=name, seconds=secs, share=secs / whole if whole else 0.0) for name, secs in ranked]


def device_trace(task: Task, candidate: Any, target: str, *, scale: str | None = None, runs: int = 3,
                 timeout_s: float = 180.0) -> list[OpTime]:
    """Run ``candidate`` ``runs`` times under ``jax.profiler`` in a child process; return its heaviest ops.

    The child gets a scrubbed environment (no API keys) and a fresh work dir; the task is re-loaded there
    from its source file, so only tasks with a ``source`` can be traced."""
    from mk.candidate import Candidate

    source = candidate.source if isinstance(candidate, Candidate) else str(candidate)
    if task.source is None or not Path(task.source).is_file():
        raise TaskError(f"task {task.name!r} has no source file to re-load in the profiling process",
                        hint="load the task from a file (a task module or benchmark dir) to trace it on the device")
    with tempfile.TemporaryDirectory(prefix="mk-trace-") as tmp:
        work = Path(tmp)
        (work / "candidate.py").write_text(source)
        spec = {"task": str(task.source), "task_id": (task.locator or {}).get("id"), "name": task.name, "scale": scale,
                "target": target, "runs": runs, "entry": Candidate.from_source(source).entry}
        (work / "spec.json").write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
                                                             "TPU_VISIBLE_CHIPS", "XLA_FLAGS", "PYTHONPATH")}
        from mk.targets import child_env, get_target

        env.update(HOME=str(work), TMPDIR=str(work), **({"JAX_PLATFORMS": "cpu"} if get_target(target).host else {}),
                   **{k: v for k, v in child_env(target).items() if k != "MK_TARGET"})  # a registered target's definition
        proc = subprocess.run([sys.executable, "-m", "mk.profile", str(work)], cwd=work, env=env, capture_output=True,
                              text=True, timeout=timeout_s)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            raise MkError(f"the profiling run failed: {tail[0][:300]}",
                          hint="check that the candidate runs on this device (e.g. `mk eval` it) and that jax.profiler works here")
        found = find_trace(work / "trace")
        if found is None:
            raise MkError("the profiler wrote no trace", hint="check that jax.profiler can write traces on this machine")
        return parse_trace(found)


def _trace_main(work: Path) -> int:
    """Child side of :func:`device_trace`: load task and candidate, warm up, trace ``runs`` calls."""
    import importlib.util

    import jax

    from mk.loaders import load_task
    from mk.targets import get_target

    spec = json.loads((work / "spec.json").read_text())
    task = load_task(spec["task_id"] if spec.get("task_id") else spec["task"])
    mod_spec = importlib.util.spec_from_file_location("mk_trace_candidate", work / "candidate.py")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    fn = jax.jit(task.bind(getattr(module, spec["entry"]), spec["scale"]))
    inputs = [jax.device_put(x) for x in task.make_inputs(spec["scale"], 0)]
    with get_target(spec["target"]).execution():
        jax.block_until_ready(fn(*inputs))  # compile outside the trace
        with jax.profiler.trace(str(work / "trace"), create_perfetto_trace=True):
            for _ in range(int(spec["runs"])):
                jax.block_until_ready(fn(*inputs))
    return 0


if __name__ == "__main__":
    raise SystemExit(_trace_main(Path(sys.argv[1])))
