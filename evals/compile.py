"""Prompt compilation: optimise the sub-agents' prompts with DSPy's GEPA or MIPROv2.

    python -m evals.compile --optimizer gepa --agent implementer --train 12 --val 6 \\
        --lm gemini/gemini-2.5-pro --target tpu --scale ci --out data/programs/

The train/val tasks are a deterministic split of the built-in suite
(:func:`split_tasks`). The metric (:class:`HarnessMetric`) judges the code a
sub-agent produced with the real harness (``mk.harness.evaluate``) and returns
``dspy.Prediction(score, feedback)``: 0 when nothing usable came out or it does
not compile, 0.25 when it compiles but is wrong, 0.5 when correct, plus up to
0.5 for a measured speedup (full at ``speedup_goal``). The feedback is what
GEPA reflects on: the verdict and reason, the compile log, the worst case's
errors and the timings. The compiled program is saved with ``program.save``
as ``<out>/<agent>.json`` plus ``<agent>.meta.json``; mk loads it by default
(:mod:`mk.compiled`).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import dspy

from mk.compiled import meta_path, signature_fields
from mk.errors import ConfigError, MkError

log = logging.getLogger("evals.compile")

AGENTS = ("implementer", "planner")
OPTIMIZERS = ("gepa", "mipro")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "programs"
SPLIT_SALT = "mk-compile-v1"


# --- data ---------------------------------------------------------------------
def split_tasks(ids: Sequence[str], *, val_fraction: float = 0.3, salt: str = SPLIT_SALT) -> tuple[list[str], list[str]]:
    """Deterministic train/val split: a task is in val when the hash of its id falls below ``val_fraction``.

    Stable under adding or removing other tasks (each id decides alone)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
    train, val = [], []
    for task_id in ids:
        h = int.from_bytes(hashlib.sha256(f"{salt}:{task_id}".encode()).digest()[:8], "big") / 2**64
        (val if h < val_fraction else train).append(task_id)
    return train, val


def _seed_plan(task: Any, target: str, analysis: Any) -> Any:
    """A plan for the Implementer's training inputs: the offline author's rationale when it has one."""
    from mk.signatures import Plan

    strategy = ""
    try:
        from mk.author import OfflineAuthor

        authored = OfflineAuthor().propose(task, target)
        if authored.proposals:
            strategy = authored.proposals[0].rationale
    except Exception as exc:  # noqa: BLE001 - the seed plan is a convenience; fall back to a generic one
        log.info("offline author unavailable for %s: %s", task.name, exc)
    if len(strategy.strip()) < 10:
        bound = getattr(analysis, "bound", None) or "memory"
        strategy = (f"Write one Pallas kernel that computes the whole reference in a single pass over blocks of the "
                    f"inputs, keeping intermediates on chip; the task is {bound}-bound, so minimise HBM traffic.")
    return Plan(approach="pallas", strategy=strategy, expected_speedup=1.5)


def make_examples(agent: str, task_ids: Sequence[str], *, target: str = "tpu", scale: str = "ci") -> list[dspy.Example]:
    """One example per task: the sub-agent's inputs (strings and a Plan) plus ``task_id`` for the metric."""
    from mk.analysis import analyze
    from mk.hardware import default_spec
    from mk.programs.validation import as_text
    from mk.suite import load_builtin

    if agent not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}", hint=f"use one of: {', '.join(AGENTS)}")
    hardware = as_text(default_spec(target))
    out = []
    for task_id in task_ids:
        task = load_builtin(task_id)
        analysis = analyze(task, scale)
        fields: dict[str, Any] = dict(task_id=task_id, task_analysis=analysis.summary(), hardware=hardware)
        if agent == "implementer":
            fields["plan"] = _seed_plan(task, target, analysis)
        else:
            fields.update(feedback="", history="")
        out.append(dspy.Example(**fields).with_inputs(*[k for k in fields]))
    return out


# --- students: the sub-agent plus what turns its answer into code -----------------
def _task(task_id: str, scale: str) -> Any:
    from mk.suite import load_builtin

    task = load_builtin(task_id)
    return task.with_scales({scale: task.scale(scale)}) if scale in task.scales else task


class ImplementerStudent(dspy.Module):
    """Runs the Implementer on one example; a rejected answer becomes ``error`` (scored 0), not an exception."""

    def __init__(self, agent: dspy.Module | None = None, *, scale: str = "ci"):
        super().__init__()
        from mk.programs import Implementer

        self.agent = agent if agent is not None else Implementer(attempts=1)
        self.scale = scale

    def forward(self, task_id: str, task_analysis: str, plan: Any, hardware: str, **_: Any) -> dspy.Prediction:
        try:
            out = self.agent(task_analysis=task_analysis, plan=plan, hardware=hardware, task=_task(task_id, self.scale))
        except MkError as exc:
            return dspy.Prediction(code="", error=str(exc))
        return dspy.Prediction(code=out.code, error="")


class PlannerStudent(dspy.Module):
    """Runs the Planner, then a fixed Implementer on its plan; only the Planner's prompts are compiled.

    The implementer is held in a closure so ``named_predictors()`` (what the optimizers
    change) sees the planner's predictor only."""

    def __init__(self, agent: dspy.Module | None = None, implementer: dspy.Module | None = None, *, scale: str = "ci"):
        super().__init__()
        from mk.programs import Implementer, Planner

        self.agent = agent if agent is not None else Planner(attempts=1)
        frozen = implementer if implementer is not None else Implementer(attempts=1)
        self._implement: Callable[..., Any] = lambda **kw: frozen(**kw)
        self.scale = scale

    def forward(self, task_id: str, task_analysis: str, hardware: str, feedback: str = "", history: str = "",
                **_: Any) -> dspy.Prediction:
        try:
            plan = self.agent(task_analysis=task_analysis, hardware=hardware, feedback=feedback, history=history).plan
        except MkError as exc:
            return dspy.Prediction(code="", plan=None, error=f"the planner failed: {exc}")
        try:
            out = self._implement(task_analysis=task_analysis, plan=plan, hardware=hardware,
                                  task=_task(task_id, self.scale))
        except MkError as exc:
            return dspy.Prediction(code="", plan=plan, error=f"the implementer could not implement the plan: {exc}")
        return dspy.Prediction(code=out.code, plan=plan, error="")


STUDENTS = {"implementer": ImplementerStudent, "planner": PlannerStudent}


# --- the metric -------------------------------------------------------------------
SCORE_COMPILES, SCORE_CORRECT = 0.25, 0.5


@dataclass(frozen=True)
class Judged:
    score: float
    feedback: str
    status: str


def score_result(result: Any, *, speedup_goal: float = 2.0) -> float:
    """0 not compiling, 0.25 compiles, 0.5 correct, + up to 0.5 for a measured speedup (full at ``speedup_goal``)."""
    if result.status == "correct":
        bonus = 0.0
        if result.speedup is not None and result.speedup > 1.0:
            bonus = 0.5 * min(1.0, math.log(result.speedup) / math.log(speedup_goal))
        return SCORE_CORRECT + bonus
    compiled = result.step("compile")
    return SCORE_COMPILES if compiled is not None and compiled.ok else 0.0


def feedback_text(result: Any) -> str:
    """What GEPA reflects on: verdict, compile log, worst mismatch, timings."""
    lines = [f"verdict: {result.status}: {result.reason}"]
    compiled = result.step("compile")
    if compiled is not None and compiled.ok is False:
        lines.append(f"compile log: {compiled.detail[:1500]}")
    bad = [c for c in result.cases if not c.ok]
    if result.cases:
        lines.append(f"correctness: {len(result.cases) - len(bad)}/{len(result.cases)} cases passed")
    worst = max(bad or result.cases, key=lambda c: (c.max_abs or 0.0), default=None)
    if worst is not None and (bad or worst.max_abs):
        lines.append(f"worst case: #{worst.index} ({worst.scale}, {worst.distribution}) max abs error {worst.max_abs}, "
                     f"max rel error {worst.max_rel}{'; ' + worst.note if worst.note else ''}")
    t = result.timing
    if t is not None and t.measured:
        lines.append(f"timing: candidate {t.candidate_median_s * 1e3:.4g} ms vs reference {t.reference_median_s * 1e3:.4g} ms "
                     f"(speedup {t.speedup:.3g}x)")
    elif t is not None:
        lines.append(f"timing: {t.reason}")
    if result.status == "correct" and (result.speedup or 0.0) <= 1.0:
        lines.append("the candidate is correct; to score higher it must be measurably faster than the reference")
    return "\n".join(lines)


class HarnessMetric:
    """``metric(gold, pred, ...)`` -> ``dspy.Prediction(score, feedback)``, judged by ``mk.harness.evaluate``.

    Verdicts are cached by (task, code) so GEPA's per-predictor feedback calls do not re-run the harness."""

    def __init__(self, *, target: str = "tpu", scale: str = "ci", speedup_goal: float = 2.0,
                 timeouts: dict[str, float] | None = None, measure: bool = True,
                 evaluate: Callable[..., Any] | None = None):
        if evaluate is None:
            from mk.harness import evaluate
        self.target, self.scale, self.speedup_goal = target, scale, speedup_goal
        self.timeouts = timeouts or {"import_s": 60, "compile_s": 60, "case_s": 60, "timing_s": 60}
        self.evaluate = evaluate
        self.measure = measure
        self.cache: dict[tuple[str, str], Judged] = {}
        self.calls = 0

    def judge(self, task_id: str, code: str | None, error: str = "") -> Judged:
        if not code or not code.strip():
            why = error or "the sub-agent returned no code"
            return Judged(0.0, f"verdict: no candidate: {why}", "no_candidate")
        key = (task_id, hashlib.sha256(code.encode()).hexdigest())
        if key not in self.cache:
            self.calls += 1
            task = _task(task_id, self.scale)
            try:
                result = self.evaluate(task, code, target=self.target, scale=self.scale, timeouts=self.timeouts,
                                       measure=self.measure)
            except MkError as exc:  # a bad candidate input (e.g. unreadable CONFIG_SPACE): the answer's fault
                self.cache[key] = Judged(0.0, f"verdict: rejected before running: {exc}", "rejected")
            else:
                self.cache[key] = Judged(score_result(result, speedup_goal=self.speedup_goal), feedback_text(result),
                                         result.status)
        return self.cache[key]

    def __call__(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
                 pred_trace: Any = None) -> dspy.Prediction:
        judged = self.judge(gold.task_id, pred.get("code") if pred is not None else None,
                            (pred.get("error") if pred is not None else "") or "")
        feedback = judged.feedback
        plan = pred.get("plan") if pred is not None else None
        if plan is not None and pred_name is not None and "implement" not in pred_name:
            feedback = f"plan: {plan.approach}: {plan.strategy}\n{feedback}"
        return dspy.Prediction(score=judged.score, feedback=feedback)

    def score(self, gold: Any, pred: Any, trace: Any = None) -> float:
        """The plain-number form (MIPROv2 and bootstrapping compare scores to a threshold)."""
        return float(self(gold, pred, trace).score)


# --- compile ------------------------------------------------------------------------
@dataclass
class CompileResult:
    program: dspy.Module
    path: Path
    meta: dict[str, Any]


def compile_agent(agent: str, optimizer: str, trainset: list[dspy.Example], *, valset: list[dspy.Example] | None = None,
                  metric: HarnessMetric, lm: Any, reflection_lm: Any = None, out: str | Path = DEFAULT_OUT,
                  max_metric_calls: int | None = None, num_candidates: int = 4, num_trials: int | None = None,
                  auto: str | None = None, student: dspy.Module | None = None, seed: int = 0,
                  num_threads: int = 1) -> CompileResult:
    """Compile one sub-agent and save it. Budgets are explicit; ``auto`` ('light'...) overrides them."""
    if agent not in AGENTS or optimizer not in OPTIMIZERS:
        raise ConfigError(f"agent must be one of {AGENTS} and optimizer one of {OPTIMIZERS}, got {agent!r}, {optimizer!r}")
    if not trainset:
        raise ConfigError("the train set is empty", hint="pass --train N with N >= 1")
    student = student if student is not None else STUDENTS[agent](scale=metric.scale)
    started = time.perf_counter()
    with dspy.context(lm=lm):
        if optimizer == "gepa":
            budget = {"auto": auto} if auto else {"max_metric_calls": max_metric_calls or 4 * len(trainset)}
            opt = dspy.GEPA(metric=metric, reflection_lm=reflection_lm or lm, num_threads=num_threads, seed=seed,
                            track_stats=False, use_merge=False, **budget)
            compiled = opt.compile(student, trainset=trainset, valset=valset or trainset)
        else:
            kwargs: dict[str, Any] = {"auto": auto} if auto else {"auto": None, "num_candidates": num_candidates}
            opt = dspy.MIPROv2(metric=metric.score, prompt_model=reflection_lm or lm, task_model=lm, seed=seed,
                               num_threads=num_threads, metric_threshold=SCORE_CORRECT, verbose=False,
                               max_bootstrapped_demos=2, max_labeled_demos=0, **kwargs)
            extra = {} if auto else {"num_trials": num_trials or max(2, num_candidates)}
            compiled = opt.compile(student, trainset=trainset, valset=valset or trainset,
                                   minibatch=len(valset or trainset) > 35, requires_permission_to_run=False, **extra)
    scores = evaluate_program(compiled, valset or trainset, metric, lm)
    return save_program(agent, compiled.agent, out, meta={
        "agent": agent, "optimizer": optimizer, "model": str(getattr(lm, "model", lm)),
        "reflection_model": str(getattr(reflection_lm or lm, "model", reflection_lm or lm)),
        "target": metric.target, "scale": metric.scale,
        "train": [e.task_id for e in trainset], "val": [e.task_id for e in (valset or [])],
        "val_scores": scores, "mean_val_score": sum(scores.values()) / len(scores) if scores else None,
        "metric_calls": metric.calls, "seconds": round(time.perf_counter() - started, 1),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })


def evaluate_program(program: dspy.Module, examples: list[dspy.Example], metric: HarnessMetric, lm: Any) -> dict[str, float]:
    scores = {}
    with dspy.context(lm=lm):
        for ex in examples:
            scores[ex.task_id] = float(metric(ex, program(**ex.inputs())).score)
    return scores


def save_program(agent: str, module: dspy.Module, out: str | Path, *, meta: dict[str, Any]) -> CompileResult:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{agent}.json"
    module.save(str(path))
    meta = dict(meta, fields=signature_fields(module), command=" ".join(["python -m evals.compile", *sys.argv[1:]]))
    meta_path(path).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    log.info("saved the compiled %s program to %s", agent, path)
    return CompileResult(module, path, meta)


# --- CLI ------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.compile", description=__doc__.split("\n\n")[0])
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="gepa")
    p.add_argument("--agent", choices=AGENTS, default="implementer")
    p.add_argument("--train", type=int, default=12, help="train tasks (from the deterministic split)")
    p.add_argument("--val", type=int, default=6, help="validation tasks (0: validate on the train set)")
    p.add_argument("--lm", default=None, help="DSPy model string (default: MK_LM / GEMINI_API_KEY as mk resolves it)")
    p.add_argument("--reflection-lm", default=None, help="model for GEPA reflection / MIPRO proposals (default: --lm)")
    p.add_argument("--target", choices=("tpu", "gpu", "cpu"), default="tpu")
    p.add_argument("--scale", default="ci")
    p.add_argument("--max-metric-calls", type=int, default=None, help="GEPA budget (default 4 x train)")
    p.add_argument("--num-candidates", type=int, default=4, help="MIPROv2 instruction candidates")
    p.add_argument("--auto", choices=("light", "medium", "heavy"), default=None, help="let the optimizer size its budget")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from mk.lm import require_lm
        from mk.suite import list_builtin

        lm = require_lm(args.lm).lm
        reflection = require_lm(args.reflection_lm).lm if args.reflection_lm else None
        train_ids, val_ids = split_tasks(list_builtin())
        train = make_examples(args.agent, train_ids[: args.train], target=args.target, scale=args.scale)
        val = make_examples(args.agent, val_ids[: args.val], target=args.target, scale=args.scale) if args.val else None
        metric = HarnessMetric(target=args.target, scale=args.scale)
        result = compile_agent(args.agent, args.optimizer, train, valset=val, metric=metric, lm=lm, reflection_lm=reflection,
                               out=args.out, max_metric_calls=args.max_metric_calls, num_candidates=args.num_candidates,
                               auto=args.auto, num_threads=args.threads)
    except MkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"path": str(result.path), "mean_val_score": result.meta["mean_val_score"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
