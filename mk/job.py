"""The main job: optimise a task end to end and write the best kernel.

``optimize_task`` resolves the author (an LM, or the offline rule-based one),
runs :class:`mk.programs.auto.Auto`, records everything in the store and writes
the fastest correct kernel with a provenance header plus a JSON report.
``optimize(fn, shapes)`` is the same for a plain JAX function.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mk import __version__
from mk.errors import ConfigError
from mk.task import Task

log = logging.getLogger(__name__)


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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def resolve_author(lm: Any = None, *, store: Any = None, run_id: str | None = None, budget: Any = None) -> tuple[Any, str]:
    """Return (author, announcement); see :func:`mk.authors.resolve_author`."""
    from mk.authors import resolve_author as _resolve

    return _resolve(lm, store=store, run_id=run_id, budget=budget)


@dataclass
class Best:
    """The kept candidate, whichever mode found it."""

    source: str
    status: str
    speedup: float | None
    proposal: str
    config: dict[str, Any]
    rationale: str


def optimize_task(
    task: Task,
    *,
    target: str = "tpu",
    lm: Any = None,
    mode: str = "auto",
    iterations: int = 4,
    db: str | Path | None = None,
    out: str | Path | None = None,
    tune: bool = True,
    max_trials: int = 6,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    budget: Any = None,
    search: dict[str, Any] | None = None,
) -> OptimizeReport:
    """Run the main job in ``mode`` ``auto`` (one trajectory) or ``search`` (``search`` holds the
    SearchConfig fields: algorithm, width, depth, branches, workers ...). ``budget``: a
    :class:`mk.budget.Budget` or BudgetMeter; ``lm``: see :func:`resolve_author`."""
    from mk.budget import BudgetMeter
    from mk.store import Store
    from mk.targets import get_target

    if mode not in ("auto", "search"):
        raise ConfigError(f"unknown mode {mode!r}", hint="use auto or search here; `mk hitl TASK` runs the interactive mode")
    tgt = get_target(target)
    meter = budget if isinstance(budget, BudgetMeter) or budget is None else BudgetMeter(budget)
    out_dir = prepare_output_dir(out)  # checked before the run, so a bad --out does not waste it
    with Store.open(db) as store:
        author, announcement = resolve_author(lm, store=store, budget=meter)
        if on_event:
            on_event("author", {"announcement": announcement})
        try:
            if mode == "search":
                outcome = _run_search(task, author, lm, store, target, iterations, tune, max_trials, search or {}, on_event, meter)
            else:
                outcome = _run_auto(task, author, store, target, iterations, tune, max_trials, meter, on_event)
        except Exception as exc:
            unusable = _unusable_lm(exc)
            if unusable is None:
                raise
            raise unusable from None
    from mk.harness.envelope import Envelope

    run_id, (judged, suite), best, stop, rows, failed = outcome
    suite_hash = suite.hash
    envelope = Envelope.of(judged, suite)
    declined = getattr(author, "declined", {})
    if not rows and declined and "no further proposals" in stop:  # the author proposed nothing: say why
        stop = "no rule applies to this task because " + "; ".join(f"{k}: {v}" for k, v in declined.items())
    kernel_path = out_dir / f"{task.name}_{target}.py" if best is not None else None
    report = OptimizeReport(
        status="failed" if failed else "correct" if best else "no_correct_candidate",
        run_id=run_id,
        task=task.name,
        target=target,
        suite_hash=suite_hash,
        kernel_path=str(kernel_path) if kernel_path else None,
        report_path=str(out_dir / f"{task.name}_{target}.report.json"),
        speedup=best.speedup if best else None,
        stop_reason=stop,
        author=author.name,
        best={"proposal": best.proposal, "config": best.config, "rationale": best.rationale} if best else None,
        iterations=rows,
        declined=declined,
        envelope=envelope.to_dict() if best else None,
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if best is not None and kernel_path is not None:
            kernel_path.write_text(with_provenance(best, task, suite_hash, tgt, envelope))
        Path(report.report_path).write_text(json.dumps(report.to_dict(), indent=2, default=str))
    except OSError as exc:
        raise ConfigError(f"cannot write the results to {out_dir}: {exc}",
                          hint=f"the run is kept in the store: `mk show {run_id} --code` prints the best kernel") from None
    return report


def _unusable_lm(exc: BaseException) -> ConfigError | None:
    """A ConfigError saying what to do when ``exc`` means the LM cannot be used at all (no key, bad key, no
    billing), else None. Transient LM errors (rate limits, timeouts) are not this."""
    try:
        from dspy.utils.exceptions import LMAuthError, LMBillingError, LMConfigurationError
    except ImportError:  # pragma: no cover - another DSPy version
        return None
    from dspy.utils.exceptions import LMInvalidRequestError, LMUnsupportedModelError

    if not isinstance(exc, (LMAuthError, LMBillingError, LMConfigurationError, LMUnsupportedModelError)) and not (
            isinstance(exc, LMInvalidRequestError) and "model" in str(exc).lower()):
        return None
    return ConfigError(f"the language model cannot be used: {str(exc).splitlines()[0]}",
                       hint="set the provider's API key (e.g. GEMINI_API_KEY), pick another --lm, or use --lm offline")


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


def _run_auto(task, author, store, target, iterations, tune, max_trials, meter, on_event):
    from mk.authors import prepare_suite
    from mk.programs.auto import Auto

    store.upsert_task(task.fingerprint(), task.name, task.kind, str(task.source) if task.source else None, task.describe())
    run_id = store.create_run(task.fingerprint(), "auto", {"target": target, "author": author.name, "locator": dict(task.locator),
                                                           "scales": list(task.scales), "iterations": iterations, "tune": tune,
                                                           "max_trials": max_trials})
    if hasattr(author, "bind_run"):
        author.bind_run(run_id)  # the LM calls from here on (test synthesis included) belong to this run
    try:
        run_task, suite = prepare_suite(author, task, target)
        store.update_run_config(run_id, {"suite_hash": suite.hash})  # what `mk resume` checks before continuing
        auto = Auto(author, target=target, iterations=iterations, store=store, tune=tune, max_trials=max_trials,
                    budget=meter if meter is not None else getattr(author, "meter", None), on_event=on_event)
        traj = auto.run(run_task, suite=suite, run_id=run_id)
    except KeyboardInterrupt:  # keep what was written, and say so in the run's row instead of leaving it 'running'
        raise store.interrupt_run(run_id, f"its snapshots and trials are kept (mk show {run_id})") from None
    except Exception as exc:
        if _unusable_lm(exc) is not None:
            store.finish_run(run_id, "failed", f"the language model cannot be used: {str(exc).splitlines()[0][:300]}")
        raise
    b = traj.best
    best = Best(b.source, b.status, b.speedup, b.proposal, b.config, b.rationale) if b else None
    rows = [{"iteration": s.iteration, "proposal": s.proposal, "status": s.status, "reason": s.reason, "speedup": s.speedup,
             "config": s.config, "tuning": s.tuning_note} for s in traj.snapshots]
    return traj.run_id, (run_task, traj.suite), best, traj.stop_reason, rows, traj.failed


def _run_search(task, author, lm, store, target, iterations, tune, max_trials, options, on_event, meter=None):
    from mk.harness.suite import build_suite
    from mk.programs.search import Search, SearchConfig

    offline = lm in (None, "offline") and author.name == "offline"
    options = dict(options)  # the caller's search= dict is left as it was
    fields = {"target": target, "iterations": max(1, min(iterations, options.pop("iterations", iterations))), "tune": tune,
              "max_trials": max_trials, **options}
    if not offline:
        fields["workers"] = "inline"  # an LM author holds a live client: it stays in this process
    config = SearchConfig(**fields)
    suite = build_suite(task)
    result = Search("offline" if offline else author, config=config, store=store, on_event=on_event,
                    budget=meter if meter is not None else getattr(author, "meter", None)).run(task, suite=suite)
    n = result.best
    best = Best(n.code, n.status, n.speedup, n.plan or n.key, {}, n.plan) if n else None
    rows = [{"node": x.key, "depth": x.depth, "status": x.status, "reason": x.reason, "speedup": x.speedup} for x in result.nodes]
    return result.run_id, (task, suite), best, result.stop_reason, rows, False


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
        f"#   reproduce: {again}" + (" (a pure-JAX rewrite: add --pure-jax)" if target.name != "cpu" and "pallas_call" not in best.source else ""),
        f"# speedup: {speed}",
        f"# author: {best.proposal}",
    ]
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
    guard = envelope.guard_source(entry) if envelope is not None else ""
    return "\n".join(header) + best.source.rstrip("\n") + "\n" + "\n".join(footer) + guard
