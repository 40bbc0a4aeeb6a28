"""What every mode writes at the end of a run: the kernel file and the JSON report.

:func:`write_outputs` takes a :class:`mk.run.service.Run` and its :class:`mk.run.service.Outcome` and writes
``<task>_<target>.py`` (the best kernel with its provenance header, tuned config and envelope guard, see
:func:`with_provenance`) and ``<task>_<target>.report.json`` into the output folder. Auto, search, HITL and
``mk resume`` all end here, so their reports have one shape and the same stop reason as the run's row.
"""

from __future__ import annotations

import json
import logging
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mk import __version__
from mk.errors import ConfigError
from mk.task import Task

log = logging.getLogger(__name__)

#: the widest line of a written kernel's header
HEADER_WIDTH = 100


@dataclass
class Best:
    """The kept candidate, whichever mode found it (its tuned config included)."""

    source: str
    status: str
    speedup: float | None
    proposal: str
    config: dict[str, Any]
    rationale: str
    #: the chip's compiler on the kept candidate (``EvalResult.compile_check`` and ``compiled``), where judged here
    compile_check: str = ""
    compiled: list[Any] = field(default_factory=list)
    #: declared sizes the verdict claims without running them (``EvalResult.covered``): envelope points
    covered: dict[str, Any] = field(default_factory=dict)
    #: without the device: the compiler's estimated speedup (``EvalResult.estimate``), never a measurement
    estimate: Any = None


@dataclass
class OptimizeReport:
    status: str
    run_id: str | None
    task: str
    target: str
    suite_hash: str
    kernel_path: str | None
    report_path: str | None
    speedup: float | None
    stop_reason: str
    author: str
    best: dict[str, Any] | None
    iterations: list[dict[str, Any]]
    declined: dict[str, str]
    #: what the kept kernel was verified on (:class:`mk.harness.envelope.Envelope` as a dict)
    envelope: dict[str, Any] | None = None
    mode: str = "auto"
    #: which chip compile ran on the kept kernel, and the compiler's figures per scale (``CompileResult`` dumps)
    compile_check: str = ""
    compiled: list[dict[str, Any]] = field(default_factory=list)
    #: the compiler's estimated speedup over XLA where no device measured one (``SpeedEstimate`` dump), labelled
    estimate: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self) -> dict[str, Any]:
        """What ``--json`` prints at the end of every mode (auto, search, HITL, resume): the same keys everywhere."""
        return {"status": self.status, "run_id": self.run_id, "kernel_path": self.kernel_path, "speedup": self.speedup,
                "stop_reason": self.stop_reason, "report_path": self.report_path, "mode": self.mode}


def prepare_output_dir(out: str | Path | None) -> Path:
    """The folder for the kernel and report (default ``mk-out``), created now; ConfigError when it cannot be written."""
    out_dir = Path(out).expanduser() if out else Path("mk-out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".mk-write-check-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write to the output folder {out_dir}: {exc}",
                          hint="pass --out (out=) a folder you can write to") from None
    return out_dir


def write_outputs(run: Any, outcome: Any, out: str | Path | None, *, author: str = "") -> OptimizeReport:
    """Write the run's best kernel (when it has one) and its report into ``out``; return the report."""
    from mk.harness.envelope import Envelope
    from mk.targets import get_target

    out_dir = Path(out).expanduser() if out else Path("mk-out")
    cfg, task, best = run.config, run.task, outcome.best
    target = get_target(cfg.target)
    envelope = Envelope.of(task, run.suite, compiled=best.covered if best else None) if run.suite is not None else None
    kernel_path = out_dir / f"{task.name}_{cfg.target}.py" if best is not None else None
    report = OptimizeReport(
        status=outcome.status, run_id=run.id, task=task.name, target=cfg.target,
        suite_hash=run.suite.hash if run.suite is not None else (cfg.suite_hash or ""),
        kernel_path=str(kernel_path) if kernel_path else None, report_path=str(out_dir / f"{task.name}_{cfg.target}.report.json"),
        speedup=best.speedup if best else None, stop_reason=outcome.stop_reason, author=author or cfg.author,
        best={"proposal": best.proposal, "config": best.config, "rationale": best.rationale} if best else None,
        iterations=list(outcome.rows), declined=dict(outcome.declined),
        envelope=envelope.to_dict() if best and envelope is not None else None, mode=cfg.mode,
        compile_check=best.compile_check if best else "",
        compiled=[c.model_dump() for c in best.compiled] if best else [],
        estimate={**best.estimate.model_dump(), "label": best.estimate.label()} if best and best.estimate else None,
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if best is not None and kernel_path is not None:
            kernel_path.write_text(with_provenance(best, task, report.suite_hash, target, envelope))
        Path(report.report_path).write_text(json.dumps(report.to_dict(), indent=2, default=str))
    except OSError as exc:
        raise ConfigError(f"cannot write the results to {out_dir}: {exc}",
                          hint=f"the run is kept in the store: `mk show {run.id} --code` prints the best kernel") from None
    return report


def wrap_comment(line: str, width: int = HEADER_WIDTH) -> list[str]:
    """A ``#`` comment line as lines of at most ``width`` characters, the same words in the same order: each
    continuation is a comment indented four spaces under the line's own text (deeper than the sub-items that
    follow, two spaces in). A single word longer than a line (a path) is never split."""
    if len(line) <= width or not line.startswith("#"):
        return [line]
    body = line[1:]
    lead = "#" + " " * (len(body) - len(body.lstrip(" ")))
    return textwrap.wrap(body.strip(), width=width, initial_indent=lead, subsequent_indent=lead + "    ",
                         break_long_words=False, break_on_hyphens=False) or [line]


def with_provenance(best: Best, task: Task, suite_hash: str, target: Any, envelope: Any = None) -> str:
    """The kernel's source with mk's provenance header: what was measured and what was not, the verified envelope
    in words (and, with ``envelope``, a guard that refuses to trace outside it), the tuned config as the default."""
    measured = target.device_present()
    device = target.device_kind() or f"none of kind {target.name} (checked on this CPU)"
    speed = f"{best.speedup:.3f}x over the reference, measured on {device}" if best.speedup is not None else (
        f"not measured (no {target.name.upper()} device here; correctness ran in {target.mode()} mode)")
    scales = list(task.scales)
    where = task.locator.get("id") if task.locator.get("kind") == "builtin" else (task.source or task.locator.get("id") or task.name)
    again = f"mk eval {where} THIS_FILE --target {target.name}"
    if len(scales) == 1:
        again += f" --scale {scales[0]}"
    if task.kind == "callable":  # a Python function has no task file mk eval could load
        again = "call mk.optimize on the same function and shapes with cache=False (it judges the kernel again)"
    header = [
        f"# mk {__version__} kernel for task {task.name!r}" + (f" ({task.source})" if task.source else ""),
        f"# target: {target.name}; device: {device}",
        f"# verdict: {best.status} on frozen suite {suite_hash}",
        f"#   reproduce: {again}" + (" (a pure-JAX rewrite: add --pure-jax)" if target.needs_kernel and "pallas_call" not in best.source else ""),
        f"# speedup: {speed}",
        *([f"#   {best.estimate.label()}"] if best.estimate is not None and best.speedup is None else []),
        f"# author: {best.proposal}",
    ]
    if best.compile_check:
        header.append(f"# chip compile: {best.compile_check}")
        from mk.harness.results import compile_lines

        header += [f"#   {line}" for line in compile_lines(best.compiled)]
    if best.config:
        tuned = "tuned by timing on " + device if measured else (
            f"not tuned: chosen without a {target.name.upper()} device, so it is the kernel's default, not a measured best")
        header.append(f"# config: {json.dumps(best.config)} ({tuned})")
    if envelope is not None:
        synthesized = [c for c in envelope.points if c not in task.scales and c not in envelope.heldout]
        if synthesized:
            header[3] += (f" rebuilds the task's own suite; this run's suite also had synthesized cases at "
                          f"{', '.join(synthesized)} (its cases are kept in the store)")
        header.append("# envelope (outside it the kernel raises a ValueError when traced):")
        header += [f"#   {line}" for line in envelope.lines()]
    else:
        header.append("# envelope: not recorded for this run; judge the kernel on your shapes with mk eval before use")
    header = [part for line in header for part in wrap_comment(line)]
    header.append("")
    from mk.candidate import Candidate

    entry = Candidate.from_source(best.source).entry  # kernel, or workload / computation
    footer = []
    if best.config:
        footer = [
            "",
            "",
            "# --- mk: the chosen CONFIG_SPACE point becomes the default ---",
            f"TUNED_CONFIG = {best.config!r}",
            f"_untuned_{entry} = {entry}",
            "",
            "",
            f"def {entry}(*args, **kwargs):",
            f"    return _untuned_{entry}(*args, **{{**TUNED_CONFIG, **kwargs}})",
            "",
        ]
    guard = envelope.guard_source(entry, tuned=best.config) if envelope is not None else ""
    return "\n".join(header) + best.source.rstrip("\n") + "\n" + "\n".join(footer) + guard
