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
import warnings
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
                outcome = _run_search(task, author, lm, store, target, iterations, tune, max_trials, search or {}, on_event)
            else:
                outcome = _run_auto(task, author, store, target, iterations, tune, max_trials, meter, on_event)
        except Exception as exc:
            unusable = _unusable_lm(exc)
            if unusable is None:
                raise
            raise unusable from None
    run_id, suite_hash, best, stop, rows = outcome
    declined = getattr(author, "declined", {})
    if not rows and declined:
        stop = "no rule applies to this task because " + "; ".join(f"{k}: {v}" for k, v in declined.items())
    kernel_path = out_dir / f"{task.name}_{target}.py" if best is not None else None
    report = OptimizeReport(
        status="correct" if best else "no_correct_candidate",
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
    )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if best is not None and kernel_path is not None:
            kernel_path.write_text(with_provenance(best, task, suite_hash, tgt))
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
    if not isinstance(exc, (LMAuthError, LMBillingError, LMConfigurationError)):
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
    run_id = store.create_run(task.fingerprint(), "auto", {"target": target, "author": author.name})
    if hasattr(author, "bind_run"):
        author.bind_run(run_id)  # the LM calls from here on (test synthesis included) belong to this run
    try:
        run_task, suite = prepare_suite(author, task, target)
        auto = Auto(author, target=target, iterations=iterations, store=store, tune=tune, max_trials=max_trials,
                    budget=meter if meter is not None else getattr(author, "meter", None), on_event=on_event)
        traj = auto.run(run_task, suite=suite, run_id=run_id)
    except KeyboardInterrupt:  # keep what was written, and say so in the run's row instead of leaving it 'running'
        store.finish_run(run_id, "interrupted", f"stopped by Ctrl-C; its snapshots and trials are kept (mk show {run_id})")
        raise
    except Exception as exc:
        if _unusable_lm(exc) is not None:
            store.finish_run(run_id, "failed", f"the language model cannot be used: {str(exc).splitlines()[0][:300]}")
        raise
    b = traj.best
    best = Best(b.source, b.status, b.speedup, b.proposal, b.config, b.rationale) if b else None
    rows = [{"iteration": s.iteration, "proposal": s.proposal, "status": s.status, "reason": s.reason, "speedup": s.speedup,
             "config": s.config, "tuning": s.tuning_note} for s in traj.snapshots]
    return traj.run_id, traj.suite_hash, best, traj.stop_reason, rows


def _run_search(task, author, lm, store, target, iterations, tune, max_trials, options, on_event):
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
    result = Search("offline" if offline else author, config=config, store=store, on_event=on_event).run(task, suite=suite)
    n = result.best
    best = Best(n.code, n.status, n.speedup, n.plan or n.key, {}, n.plan) if n else None
    rows = [{"node": x.key, "depth": x.depth, "status": x.status, "reason": x.reason, "speedup": x.speedup} for x in result.nodes]
    return result.run_id, suite.hash, best, result.stop_reason, rows


def with_provenance(best: Best, task: Task, suite_hash: str, target: Any) -> str:
    """The kernel's source with mk's provenance header (and its tuned config as the default)."""
    speed = f"{best.speedup:.3f}x over the reference" if best.speedup is not None else (
        "not measured (no " + target.name.upper() + " device here; correctness ran in " + target.mode() + " mode)")
    device = target.device_kind() or f"none of kind {target.name} (checked on the CPU)"
    header = [
        f"# mk {__version__} kernel for task {task.name!r}" + (f" ({task.source})" if task.source else ""),
        f"# target: {target.name}; device: {device}",
        f"# verdict: {best.status}; frozen suite: {suite_hash}",
        f"# speedup: {speed}",
        f"# author: {best.proposal}; tuned config: {json.dumps(best.config)}",
    ]
    if target.name != "cpu" and "pallas_call" not in best.source:
        header.append(f"# a pure-JAX rewrite (no Pallas kernel): judge it with `mk eval TASK THIS_FILE --target {target.name} --pure-jax`")
    header.append("")
    footer = []
    if best.config:
        footer = [
            "",
            "",
            "# --- tuned by mk: the winning CONFIG_SPACE point becomes the default ---",
            f"TUNED_CONFIG = {best.config!r}",
            "_untuned_kernel = kernel",
            "",
            "",
            "def kernel(*args, **kwargs):",
            "    return _untuned_kernel(*args, **{**TUNED_CONFIG, **kwargs})",
            "",
        ]
    return "\n".join(header) + best.source.rstrip("\n") + "\n" + "\n".join(footer)


class OptimizedFunction:
    """Callable returned by :func:`optimize`: the best kernel where verified, else the reference (with a warning).

    The kernel runs only on inputs of a verified shape and dtype, and only where its target's device is present
    (``cpu`` kernels anywhere); :meth:`run_kernel` runs it regardless (TPU/GPU kernels interpreted on a CPU)."""

    def __init__(self, fn: Callable[..., Any], task: Task, report: OptimizeReport, source: str | None, *, cached: bool = False):
        self.reference = fn
        self.task = task
        self.report = report
        self.source = source
        self.cached = cached
        self._kernel = None
        if source:
            namespace: dict[str, Any] = {}
            exec(compile(source, report.kernel_path or f"<mk kernel {task.name}>", "exec"), namespace)  # noqa: S102 - judged
            self._kernel = namespace["kernel"]
        self._verified = {
            tuple((tuple(shape), a.dtype) for shape, a in zip(task.shapes(n), task.args)) for n in task.scales
        }

    def __call__(self, *args: Any) -> Any:
        from mk.targets import get_target

        signature = tuple((tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", ""))) for a in args)
        target = get_target(self.report.target)
        if self._kernel is None:
            why = "no verified kernel"
        elif signature not in self._verified:
            why = f"no verified kernel for inputs {signature}"
        elif target.name != "cpu" and not target.device_present():
            why = f"the kernel was verified for {target.name}, and this machine has no {target.name.upper()}"
        else:
            return self._kernel(*args)
        warnings.warn(f"mk: {why}; running the reference", stacklevel=2)
        return self.reference(*args)

    def run_kernel(self, *args: Any) -> Any:
        """Run the kernel here whatever the device (TPU/GPU kernels in Pallas interpret mode on a CPU)."""
        from mk.targets import get_target

        if self._kernel is None:
            raise ConfigError("there is no verified kernel to run", hint=self.report.stop_reason)
        with get_target(self.report.target).execution():
            return self._kernel(*args)

    def save(self, path: str | Path) -> Path:
        if not self.source:
            raise ConfigError("there is no verified kernel to save", hint=self.report.stop_reason)
        p = Path(path)
        p.write_text(self.source)
        return p


def cache_key(fn: Callable[..., Any], task: Task, target: str) -> str:
    """(function source, shapes and dtypes of every scale, statics, target, device kind, mk version) as a hash."""
    import hashlib
    import inspect

    from mk.targets import get_target

    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        source = repr((code.co_code, code.co_consts)) if code is not None else repr(fn)
    spec = task.describe()
    blob = json.dumps({"source": source, "inputs": spec["inputs"], "scales": spec["scales"], "static": spec["static"],
                       "target": target, "device": get_target(target).device_kind() or "none", "mk": __version__},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def optimize(fn: Callable[..., Any], shapes: Any, *, cache: bool = True, **kwargs: Any) -> OptimizedFunction:
    """Optimise ``fn`` for ``shapes`` and return a callable running the best kernel.

    Results are cached in the store by :func:`cache_key`, so a second call with the same function, shapes, device
    and mk version returns at once (``cache=False`` recomputes)."""
    from datetime import datetime, timezone

    from mk.loaders import task_from_callable
    from mk.store import Store
    from mk.targets import get_target

    task_kw = {k: kwargs.pop(k) for k in ("static", "atol", "rtol", "name", "scales") if k in kwargs}
    task = task_from_callable(fn, shapes, **task_kw)
    target = kwargs.get("target", "tpu")
    key = cache_key(fn, task, target)
    if cache:
        with Store.open(kwargs.get("db")) as store:
            rows = store.query("select kernel_source, report from optimize_cache where key = ?", [key])
        if rows:
            report = OptimizeReport(**rows[0]["report"])
            log.info("mk.optimize: cached result of run %s", report.run_id)
            return OptimizedFunction(fn, task, report, rows[0]["kernel_source"], cached=True)
    report = optimize_task(task, **kwargs)
    source = Path(report.kernel_path).read_text() if report.kernel_path else None
    with Store.open(kwargs.get("db")) as store:
        store.execute("delete from optimize_cache where key = ?", [key])
        store.execute("insert into optimize_cache values (?, ?, ?, ?, ?, ?, ?, ?)",
                      [key, task.name, target, get_target(target).device_kind() or "none", report.run_id, source,
                       json.dumps(report.to_dict(), default=str), datetime.now(timezone.utc).replace(tzinfo=None)])
    return OptimizedFunction(fn, task, report, source)
