"""Autotuning a candidate's ``CONFIG_SPACE`` with Optuna.

Each trial is a full trip through the judge on a fast subset of the frozen
suite (compile, correctness, timing where the target can be timed). A config
that fails is a *failed trial with its reason*, never an exception. The winner
is re-verified on the whole suite. Trials live in the mk DuckDB file through
the Optuna journal backend, so an interrupted study resumes where it stopped.

Without a device of the target's kind nothing can be timed. Where the judge
gives the chip compiler's estimate instead (``EvalResult.estimate``: TPU, see
:mod:`mk.harness.estimate`), configs are ranked by the estimated kernel time at
the size the estimate describes (the largest compiled, usually the task's own),
and every figure says it is an estimate. Otherwise the tuner only establishes
which configs are valid, keeps the candidate's default (or the first valid one)
and says so.
"""

from __future__ import annotations

import ast
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from mk.candidate import Candidate
from mk.harness.results import EvalResult
from mk.harness.suite import FrozenSuite
from mk.task import Task

log = logging.getLogger(__name__)


#: estimated kernel times closer than this are a tie: the default config is kept (an estimate's resolution)
ESTIMATE_TIE = 0.02


class _TrialFailed(Exception):
    """Raised inside the objective so Optuna records a FAIL with the reason."""


@dataclass
class TrialOutcome:
    number: int
    params: dict[str, Any]
    status: str
    reason: str
    #: measured on the device (median kernel seconds), or None
    seconds: float | None = None
    #: without the device: the compiler's estimated kernel seconds at ``estimated_at`` (never a measurement)
    estimated_s: float | None = None
    estimated_at: str = ""


@dataclass
class TuneResult:
    config: dict[str, Any]
    result: EvalResult | None
    trials: list[TrialOutcome] = field(default_factory=list)
    measured: bool = False
    #: ranked by the compiler's estimate (no device): an estimate, never a measurement
    estimated: bool = False
    note: str = ""


def space_size(space: dict[str, list[Any]]) -> int:
    return math.prod(len(v) for v in space.values()) if space else 1


def autotune(
    task: Task,
    candidate: Candidate,
    *,
    target: str,
    suite: FrozenSuite,
    evaluate: Callable[..., EvalResult],
    store: Any = None,
    study_name: str | None = None,
    run_id: str | None = None,
    node_id: str | None = None,
    max_trials: int = 8,
    subset: int = 2,
    on_trial: Callable[[TrialOutcome], None] | None = None,
    should_stop: Callable[[], str | None] | None = None,
    judged_default: EvalResult | None = None,
) -> TuneResult:
    """Tune ``candidate`` and return the re-verified winner. ``should_stop()`` is asked before every trial (a run's
    budget): when it gives a reason, tuning stops there and no winner is re-verified (``result`` is None; the
    caller keeps its verified default). ``judged_default``: the candidate already judged with its own keyword
    defaults (``config={}``) on the whole ``suite``, a superset of the trials' fast subset; the trial of that config
    reuses the verdict instead of judging it again."""
    import optuna

    space = {k: list(v) for k, v in (candidate.config_space or {}).items() if v}
    default = _default_config(candidate, space)
    if not space:
        res = evaluate(task, candidate, target=target, suite=suite, config={})
        return TuneResult({}, res, [], measured=bool(res.timing and res.timing.measured), note="no CONFIG_SPACE: nothing to tune")

    if max_trials <= 0:  # no trials asked for (--trials 0): the default's own verdict, nothing judged again
        return TuneResult({}, judged_default, [], measured=bool(judged_default and judged_default.timing
                                                               and judged_default.timing.measured),
                          note="not tuned: no trials asked for")
    defaults = keyword_defaults(candidate)
    judged_is_default = bool(default) and all(k in defaults and defaults[k] == v for k, v in default.items())
    if judged_default is not None and judged_is_default and judged_default.status == "correct" \
            and not _figure(judged_default):
        # nothing would rank the trials (no device to time them, no compiler estimate for this target): the default is
        # kept without them, judged as a kept verdict (its claims, the other chips' figures) like a tuned winner
        final = evaluate(task, candidate, target=target, suite=suite, config=default, **_kept_options(evaluate, target))
        return TuneResult(default, final, [], note=f"not tuned: {_no_figure(judged_default)}; kept the default config")

    # ERROR: Optuna would log every failed trial (and an interrupt) with a traceback; mk reports trials itself
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = None
    if store is not None:
        from mk.tuning.journal import journal_storage

        storage = journal_storage(store, study_name or f"tune-{candidate.digest}")
    n = min(space_size(space), max_trials)
    sampler = optuna.samplers.GridSampler(space, seed=0) if space_size(space) <= max_trials else optuna.samplers.TPESampler(seed=0)
    study = optuna.create_study(
        study_name=study_name or "mk-autotune", storage=storage, sampler=sampler, direction="minimize", load_if_exists=True
    )
    if default and not study.trials and not isinstance(sampler, optuna.samplers.GridSampler):
        study.enqueue_trial(default)  # the grid already holds it
    fast = suite.subset(subset)
    outcomes: list[TrialOutcome] = []
    seen: dict[str, EvalResult] = {}  # a sampler may repeat a config: judge each config once

    def key(params: dict[str, Any]) -> str:
        return repr(sorted(params.items()))

    if judged_default is not None and judged_is_default:
        seen[key(default)] = judged_default  # config={} is exactly this config

    # a trial is a screen (the judge's costliest checks are the winner's, judged whole below) where the judge takes it
    screened = {"screen": True} if _takes(evaluate, "screen") else {}

    def objective(trial: "optuna.Trial") -> float:
        params = {k: trial.suggest_categorical(k, v) for k, v in space.items()}
        res = seen.get(key(params)) or evaluate(task, candidate, target=target, suite=fast, config=params, **screened)
        seen[key(params)] = res
        seconds = res.timing.candidate_median_s if res.timing and res.timing.measured else None
        est = res.estimate if seconds is None and res.status == "correct" else None
        at = f"{est.chip} at {est.scale}" if est is not None else ""
        outcome = TrialOutcome(trial.number, params, res.status, res.reason, seconds,
                               est.kernel_s if est is not None else None, at)
        outcomes.append(outcome)
        if store is not None:
            value, basis = (seconds, "measured") if seconds is not None else (outcome.estimated_s, f"estimated {at}") \
                if est is not None else (None, None)
            store.record_trial(run_id, node_id, study.study_name, trial.number, params, res.status, value, res.reason,
                               basis=basis)
        if on_trial:
            on_trial(outcome)
        trial.set_user_attr("status", res.status)
        trial.set_user_attr("reason", res.reason)
        if res.status == "compile_error" and res.compiled and not all(c.ok for c in res.compiled):
            raise optuna.TrialPruned(res.reason)  # the chip's compiler refused the config: pruned, with its reason
        if res.status != "correct":
            raise _TrialFailed(res.reason)
        trial.set_user_attr("basis", "measured" if seconds is not None else f"estimated {at}" if est is not None else "none")
        if seconds is not None:
            return seconds
        # a valid config with no figure is the worst to the sampler, never the best
        return outcome.estimated_s if outcome.estimated_s is not None else float("inf")

    stopped: list[str] = []

    def stop_between_trials(study: "optuna.Study", trial: Any) -> None:
        reason = should_stop() if should_stop is not None else None
        if reason:
            stopped.append(reason)
            study.stop()

    done = sum(1 for t in study.trials if t.state.is_finished())
    if done < n and not (should_stop is not None and should_stop()):
        study.optimize(objective, n_trials=n - done, catch=(_TrialFailed,), callbacks=[stop_between_trials])
    elif done < n:
        stopped.append(should_stop() or "stopped")
    if stopped:
        return TuneResult(default, None, outcomes, note=f"tuning stopped after {len(outcomes)} trials: {stopped[0]}")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        reasons = "; ".join(sorted({str(t.user_attrs.get("reason", "failed")) for t in study.trials}))[:400]
        return TuneResult(default, None, outcomes, note=f"no config passed the fast suite: {reasons}")
    # ranked only when every valid config has the same kind of figure: all measured, or all estimated for the same
    # chip and size (a resumed study can hold trials measured on a device and trials estimated here)
    bases = {_basis(t) for t in complete}
    measured = bases == {"measured"}
    estimated = len(bases) == 1 and next(iter(bases)).startswith("estimated ")
    if measured:
        best = min(complete, key=lambda t: t.value).params
        note = "fastest config that passed the fast subset"
    elif estimated:
        best, note = _by_estimate(complete, default, next(iter(bases)).removeprefix("estimated "))
    else:
        valid = [t.params for t in complete]
        best = default if default in valid else valid[0]
        note = ("speed not measured on this machine for this target: kept the default config among the valid ones"
                if bases == {"none"} else
                f"the valid configs' figures cannot be compared ({', '.join(sorted(bases))}): kept the default config")
    # the trials were screens: the winner is judged whole before it is kept; one refused there (a race, rule 15, the
    # backward, a fresh size) gives way to the next config by the same ranking, then to the default, which passed the
    # whole suite already (judged again here as a kept verdict: its claims and the other chips' figures)
    ranked = [best] + [t.params for t in sorted(complete, key=lambda t: t.value if t.value is not None else math.inf)
                       if t.params != best]
    order = list({key(c): c for c in ranked[:WHOLE_TRIES] + [default]}.values())  # in order, each config once
    refused: list[str] = []
    final = None
    for config in order:
        final = evaluate(task, candidate, target=target, suite=suite, config=config, **_kept_options(evaluate, target))
        if final.status == "correct":
            if refused:
                note = (f"{'; '.join(refused)}; kept {config}" + (" (the default)" if config == default else "")
                        + f" (ranked as: {note})")
            return TuneResult(config, final, outcomes, measured=measured, estimated=estimated, note=note)
        refused.append(f"{config} passed its screen but was refused when judged whole ({final.status}: "
                       f"{final.reason[:200]})")
    return TuneResult(best, final, outcomes, measured=measured, estimated=estimated, note="; ".join(refused))


#: screened configs judged whole, best first, before the default is kept (each a whole verdict with its claims)
WHOLE_TRIES = 2


def _figure(res: EvalResult) -> bool:
    """Whether a verdict has a figure a config could be ranked by: a measured time, or the compiler's estimate."""
    return bool(res.timing and res.timing.measured) or res.estimate is not None


def _no_figure(res: EvalResult) -> str:
    """Why a verdict has no figure, in the judge's words where it gave them."""
    unmeasured = res.timing.reason if res.timing and res.timing.reason else "no device of this kind here to time a config"
    if not unmeasured.startswith("not measured: no "):  # a device here whose timing failed: no estimate is made there
        return unmeasured
    why = next((f for f in res.flags if f.startswith("no speed estimate")), "")
    return f"{unmeasured}; {why or 'no compiler estimate for this target'}"


def _basis(trial: Any) -> str:
    """What a finished trial's value is: ``measured``, ``estimated <chip> at <scale>``, or ``none``."""
    basis = trial.user_attrs.get("basis")
    if basis:
        return str(basis)
    if trial.user_attrs.get("estimated_at"):  # a study begun before trials recorded their basis
        return f"estimated {trial.user_attrs['estimated_at']}"
    return "measured" if trial.value not in (None, 0.0) else "none"


def _by_estimate(complete: list[Any], default: dict[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """The config the compiler's estimate ranks first, unless the default's estimate is within
    :data:`ESTIMATE_TIE` of it: the model cannot tell such configs apart (a memory-bound kernel's estimate is its
    bytes over the bandwidth whatever its blocks), so the default is kept and the note says why."""
    first = min(complete, key=lambda t: t.value)
    base = next((t for t in complete if t.params == default), None)
    words = f"for {where} ({len(complete)} valid configs compiled; an estimate, not a measurement)"
    if base is not None and base.value <= first.value * (1 + ESTIMATE_TIE):
        spread = max(t.value for t in complete) / first.value - 1
        return default, (f"kept the default config: the compiler's estimate ranks no config more than "
                         f"{ESTIMATE_TIE:.0%} faster {words}; the estimates differ by {spread:.1%} in all")
    return first.params, f"fastest config that passed the fast subset, by the compiler's estimate {words}"


def _kept_options(evaluate: Callable[..., EvalResult], target: str) -> dict[str, Any]:
    """The winner's verification is the verdict kept: it also compiles for every chip of the target's kind (its
    figures per chip go into the kernel's header) and runs one case at each declared size its envelope may claim,
    where the judge given takes ``also_chips`` and ``claim``."""
    from mk.chips import chips_for_target

    out: dict[str, Any] = {"claim": True} if _takes(evaluate, "claim") else {}
    if _takes(evaluate, "also_chips") and chips_for_target(target):
        out["also_chips"] = chips_for_target(target)
    return out


def _takes(evaluate: Callable[..., EvalResult], name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(evaluate).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _default_config(candidate: Candidate, space: dict[str, list[Any]]) -> dict[str, Any]:
    """The entry's keyword defaults, where they lie in the space."""
    defaults = keyword_defaults(candidate)
    cfg = {k: defaults[k] for k in space if k in defaults and defaults[k] in space[k]}
    return cfg if len(cfg) == len(space) else {k: v[-1] for k, v in space.items()}


def keyword_defaults(candidate: Candidate) -> dict[str, Any]:
    """Literal defaults of the entry's keyword-only parameters (parsed, never run)."""
    for node in ast.parse(candidate.source).body:
        if isinstance(node, ast.FunctionDef) and node.name == candidate.entry:
            out = {}
            for arg, value in zip(node.args.kwonlyargs, node.args.kw_defaults):
                if value is not None:
                    try:
                        out[arg.arg] = ast.literal_eval(value)
                    except (ValueError, TypeError, SyntaxError):  # not a literal: no default for this one
                        continue
            return out
    return {}
