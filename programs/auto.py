"""Auto: one optimisation trajectory, as explicit phases.

    plan -> implement -> validate (compile; on error the author's fixer, up to
    a limit) -> test (frozen suite) -> autotune -> profile -> snapshot -> plan …

The suite is frozen (and hashed) before the first plan. A failed phase
short-circuits to a snapshot that records the failure, and its error context
becomes feedback for the next plan. Every snapshot goes to the store; at the
end Auto rolls back to the fastest correct snapshot (not the last one) and says
why it stopped. ``Auto.start``/``Auto.step`` run one phase at a time, which is
how the human-in-the-loop session pauses after each phase.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from mk.author.proposal import Proposal
from mk.contracts import Author, Context, Plan, Snapshot, as_author, declined_reason  # noqa: F401 - the contracts (mk.contracts)
from mk.candidate import Candidate
from mk.errors import BudgetExceeded, CandidateError, MkError
from mk.harness.results import EvalResult
from mk.harness.suite import FrozenSuite, build_suite
from mk.profile import ProfileReport, profile
from mk.task import Task
from mk.tuning.autotune import TuneResult, autotune

log = logging.getLogger(__name__)

PHASES = ("plan", "implement", "validate", "test", "autotune", "profile", "snapshot")


@dataclass
class Attempt:
    """The state of the iteration in flight; a HITL session may edit ``plan`` or ``proposal``."""

    iteration: int
    next_phase: str = "plan"
    plan: Plan | None = None
    proposal: Proposal | None = None
    candidate: Candidate | None = None
    node_id: str | None = None
    fixes: int = 0
    validation: EvalResult | None = None
    test: EvalResult | None = None
    tuned: TuneResult | None = None
    profile: ProfileReport | None = None
    feedback: str = ""
    failure: tuple[str, str, str] | None = None  # (phase, status, reason)
    fixed_from: tuple[str, str] | None = None  # (error, source) the last fix started from, until it validates


@dataclass
class Trajectory:
    task: Task
    suite: FrozenSuite
    run_id: str | None
    snapshots: list[Snapshot] = field(default_factory=list)
    attempt: Attempt = field(default_factory=lambda: Attempt(1))
    parent: str | None = None
    done: bool = False
    stop_reason: str = ""
    failed: bool = False  # stopped by a fault (the language model failing after its retries), not by a rule
    run: Any = None  # the mk.run.Run this trajectory belongs to, when it is stored
    plan_lessons: str | None = None  # earlier runs' plans for similar tasks (None: not looked up yet)

    @property
    def best(self) -> Snapshot | None:
        from mk.run.best import best_of

        return best_of(self.snapshots)

    @property
    def status(self) -> str:
        """The run's status: ``failed`` after a fault (its best kernel, if any, is still kept and written)."""
        return "failed" if self.failed else "correct" if self.best else "no_correct_candidate"

    @property
    def suite_hash(self) -> str:
        return self.suite.hash


@dataclass
class PhaseResult:
    phase: str
    artifact: Any
    ok: bool
    message: str = ""


class Auto:
    def __init__(
        self,
        author: Author,
        *,
        target: str = "tpu",
        iterations: int = 4,
        target_speedup: float | None = None,
        target_roofline: float | None = None,
        evaluate: Callable[..., EvalResult] | None = None,
        store: Any = None,
        tune: bool = True,
        max_trials: int = 6,
        max_fixes: int = 2,
        budget: Any = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        lessons: Any = None,
    ):
        """``lessons``: where lessons are recalled from and kept (the store by default; a search worker, which holds
        no store, passes a :class:`mk.lessons.LessonBuffer`)."""
        if evaluate is None:
            from mk.harness.evaluate import evaluate
        self.author = as_author(author)
        self.target = target
        self.lessons = lessons if lessons is not None else store
        self.iterations = iterations
        self.target_speedup = target_speedup
        self.target_roofline = target_roofline
        self.evaluate = evaluate
        self.store = store
        self.tune = tune
        self.max_trials = max_trials
        self.max_fixes = max_fixes
        self.budget = budget
        self.on_event = on_event or (lambda kind, data: None)

    # --- driving -----------------------------------------------------------------
    def run(self, task: Task, *, suite: FrozenSuite | None = None, run_id: str | None = None) -> Trajectory:
        traj = self.start(task, suite=suite, run_id=run_id)
        while not traj.done:
            self.step(traj)
        return traj

    def start(self, task: Task, *, suite: FrozenSuite | None = None, run_id: str | None = None, mode: str = "auto",
              run: Any = None) -> Trajectory:
        """A new trajectory. ``run`` (a :class:`mk.run.Run`) is the run it belongs to; without one, Auto creates it
        through the run service when it has a store. The suite is frozen before the first plan (rule 14), with the
        author's synthesised cases, unless ``suite`` or the run already has one."""
        if run is None and self.store is not None and run_id is None:
            from mk.run import Run, RunConfig
            from mk.run.config import author_fields

            run = Run.create(self.store, task, RunConfig(mode=mode, target=self.target, **author_fields(self.author),
                                                         iterations=self.iterations, tune=self.tune, max_trials=self.max_trials,
                                                         max_fixes=self.max_fixes))
        if run is not None:
            task, suite = (run.task, run.suite) if run.suite is not None else run.freeze(self.author, suite=suite)
            run_id = run.id
        else:
            suite = suite or build_suite(task)
            if self.store is not None and run_id:
                self.store.record_suite(suite.hash, task.fingerprint(), [c.key for c in suite.cases])
        self.on_event("suite", {"hash": suite.hash, "cases": len(suite.cases)})
        return Trajectory(task, suite, run_id, run=run)

    def step(self, traj: Trajectory) -> PhaseResult:
        """Run the next phase of ``traj`` and return what it produced."""
        from mk.interrupts import raise_if_pending

        raise_if_pending()  # a Ctrl-C Python swallowed during the last phase (mk/interrupts.py)
        if traj.done:
            return PhaseResult("done", traj.best, True, traj.stop_reason)
        phase = traj.attempt.next_phase
        try:
            if self.budget is not None:
                self.budget.check()
            result = getattr(self, f"_{phase}")(traj)
        except BudgetExceeded as exc:
            self._keep_verified(traj)
            from mk.run.stop import budget_stop_reason

            resume = traj.run.resume_command() if traj.run is not None else None
            self._finish(traj, budget_stop_reason(self.budget, resume, fallback=exc.message))
            return PhaseResult(phase, None, False, traj.stop_reason)
        except Exception as exc:
            from mk.lm import lm_failed

            if not lm_failed(exc):
                raise
            traj.failed = True
            best = traj.best
            self._finish(traj, f"the language model failed in the {phase} phase after its retries "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''})"
                               + ("; the best kernel so far is kept" if best else ""))
            return PhaseResult(phase, None, False, traj.stop_reason)
        self.on_event("phase", {"phase": phase, "ok": result.ok, "message": result.message, "iteration": traj.attempt.iteration})
        return result

    # --- phases --------------------------------------------------------------------
    def _ctx(self, traj: Trajectory) -> Context:
        # the previous round only: every earlier one is in ``history`` already (an author listing both saw it twice)
        feedback = traj.snapshots[-1].summary() if traj.snapshots else ""
        a = traj.attempt
        return Context(traj.task, self.target, traj.snapshots, feedback, traj.run_id, a.node_id or traj.parent, a.iteration, a.plan)

    def _plan(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        if a.iteration > self.iterations:
            self._finish(traj, f"ran the maximum of {self.iterations} iterations")
            return PhaseResult("plan", None, True, traj.stop_reason)
        ctx = self._ctx(traj)
        ctx.lessons = self._plan_lessons(traj)
        plan = self.author.plan(ctx)
        if plan is None:
            why = self.author.stop_reason or ""
            self._finish(traj, f"the {self.author.name} author has no further proposals" + (f" ({why})" if why else ""))
            return PhaseResult("plan", None, True, traj.stop_reason)
        a.plan, a.next_phase = plan, "implement"
        self.on_event("proposal", {"iteration": a.iteration, "name": plan.name, "rationale": plan.text})
        return PhaseResult("plan", plan, True, plan.name)

    def _implement(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        try:
            a.proposal = self.author.implement(self._ctx(traj), a.plan)
        except MkError as exc:
            return self._fail(traj, "implement", "rejected", f"the author could not implement the plan: {exc}")
        return self.accept_code(traj, "implement")

    def accept_code(self, traj: Trajectory, phase: str) -> PhaseResult:
        """Take ``traj.attempt.proposal`` as the code to judge next (authored, fixed or edited by hand)."""
        a = traj.attempt
        code_hash = hashlib.sha256(a.proposal.source.encode()).hexdigest()[:16]
        if self.store is not None and traj.run_id:
            if a.node_id is None:
                a.node_id = self.store.add_node(traj.run_id, traj.parent, code=a.proposal.source, plan=a.plan.text if a.plan else "",
                                                code_hash=code_hash, status="pending", reason="", speedup=None, depth=a.iteration,
                                                meta={"template": a.proposal.template, "name": a.proposal.name})
            else:
                self.store.update_node(a.node_id, code=a.proposal.source, code_hash=code_hash)
        try:
            a.candidate = Candidate.from_source(a.proposal.source)
        except CandidateError as exc:  # no entry point, a malformed CONFIG_SPACE: the fixer is told, like a compile error
            if self._fix(traj, str(exc), str(exc)):
                return self.accept_code(traj, phase)
            return self._fail(traj, phase, "rejected", str(exc))
        a.next_phase = "validate"
        return PhaseResult(phase, a.proposal, True, a.proposal.name)

    def _fix(self, traj: Trajectory, reason: str, error: str) -> bool:
        """Ask the author to fix the attempt in flight (``error``: what the fixer reads; ``reason``: the verdict's
        line, the lesson's key); True when it proposed a fix, now ``traj.attempt.proposal``. At most ``max_fixes``
        per attempt."""
        a = traj.attempt
        if a.fixes >= self.max_fixes:
            return False
        a.fixes += 1
        from mk.lessons import recall

        ctx = self._ctx(traj)
        ctx.lessons = recall(self.lessons, reason, kind="fix", target=self.target, exclude_run=traj.run_id)
        fixed = self.author.fix(ctx, a.proposal, error)
        if fixed is None:
            return False
        a.fixed_from = (reason, a.proposal.source)
        a.proposal = fixed
        return True

    def _judge(self, traj: Trajectory) -> Callable[..., EvalResult]:
        """The harness for the attempt in flight: pure-JAX rewrites are judged without requiring a pallas_call."""
        from mk.author import PURE_JAX

        proposal = traj.attempt.proposal
        from mk.targets import get_target

        if proposal is not None and proposal.template in PURE_JAX and get_target(self.target).needs_kernel:
            return functools.partial(self.evaluate, require_pallas=False)
        return self.evaluate

    def _validate(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        res = self._judge(traj)(traj.task, a.candidate, target=self.target, suite=traj.suite.subset(1), measure=False, config={})
        a.validation = res
        if res.status == "correct":
            a.next_phase = "test"
            if a.fixed_from is not None:  # the last fix resolved the error: a lesson for later runs
                from mk.lessons import record_fix

                record_fix(self.lessons, task=traj.task, target=self.target, error=a.fixed_from[0], before=a.fixed_from[1],
                           after=a.proposal.source, run_id=traj.run_id, node_id=a.node_id)
                a.fixed_from = None
            return PhaseResult("validate", res, True, "compiles and passes a first case")
        # a rejection (the static check's try/except, denied import or module state; a forbidden operation at run
        # time; a program without the required pallas_call) is fixed like a compile error: the judge judges the fix
        if res.status in ("compile_error", "rejected") and self._fix(traj, res.reason, res.fix_text()):
            out = self.accept_code(traj, "validate")
            what = "rejection" if res.status == "rejected" else "compile error"
            return PhaseResult("validate", res, False, f"{what}, fix {a.fixes} proposed: {res.reason}") if out.ok else out
        return self._fail(traj, "validate", res.status, res.reason, res)

    def _test(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        res = self._judge(traj)(traj.task, a.candidate, target=self.target, suite=traj.suite, config={})
        a.test = res
        if res.status != "correct":
            return self._fail(traj, "test", res.status, res.reason, res)
        a.next_phase = "autotune"
        return PhaseResult("test", res, True, res.reason)

    def _autotune(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        a.next_phase = "profile"
        if not (self.tune and a.candidate.config_space):
            a.tuned = TuneResult({}, a.test, [], measured=bool(a.test.timing and a.test.timing.measured), note="not tuned")
            return PhaseResult("autotune", a.tuned, True, "nothing to tune")
        a.tuned = autotune(
            traj.task, a.candidate, target=self.target, suite=traj.suite, evaluate=self._judge(traj), store=self.store,
            study_name=f"{traj.run_id or 'local'}-{a.iteration}-{a.candidate.digest}", run_id=traj.run_id, node_id=a.node_id,
            max_trials=self.max_trials,
            on_trial=lambda t: self.on_event("trial", {"iteration": a.iteration, "params": t.params, "status": t.status, "reason": t.reason,
                                                       "seconds": t.seconds, "estimated_s": t.estimated_s,
                                                       "estimated_at": t.estimated_at}),
            should_stop=self.budget.exceeded if self.budget is not None else None,
            judged_default=a.test,  # the default config's verdict on the whole suite: its trial is not judged again
        )
        if a.tuned.result is None or a.tuned.result.status != "correct":
            # keep the untuned, verified default rather than lose a correct candidate
            a.tuned = TuneResult({}, a.test, a.tuned.trials, note=f"tuning found no better verified config ({a.tuned.note})")
        return PhaseResult("autotune", a.tuned, True, a.tuned.note)

    def _profile(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        # the scale that was timed (the task's own), not the last scale of the suite (a synthesised or held-out one)
        timing = a.tuned.result.timing if a.tuned.result is not None else None
        scale = timing.scale if timing is not None and timing.scale else traj.task.default_scale
        a.profile = profile(traj.task, a.tuned.result, self.target, scale=scale if scale in traj.task.scales else None)
        a.feedback = self.author.analyse(self._ctx(traj), a.profile)
        a.next_phase = "snapshot"
        return PhaseResult("profile", a.profile, True, a.profile.summary())

    def _snapshot(self, traj: Trajectory) -> PhaseResult:
        a = traj.attempt
        if a.failure:
            phase, status, reason = a.failure
            res, config, note = (a.test or a.validation), {}, ""
        else:
            phase, res = None, a.tuned.result
            status, reason, config, note = res.status, res.reason, a.tuned.config, a.tuned.note
        proposal = a.proposal or Proposal(a.plan.name if a.plan else "none", "", a.plan.text if a.plan else "", "none")
        speedup = res.speedup if res is not None and status == "correct" else None
        snap = Snapshot(a.iteration, proposal.name, proposal.rationale, proposal.source, config, status, reason, speedup, res,
                        a.node_id, note, phase, a.profile, a.feedback)
        self._record(traj, snap)
        if snap.correct and a.plan is not None:
            from mk.lessons import record_plan

            record_plan(self.lessons, task=traj.task, target=self.target, plan=f"{a.plan.name}: {a.plan.text}", speedup=speedup,
                        run_id=traj.run_id, node_id=a.node_id)
        traj.snapshots.append(snap)
        traj.parent = a.node_id or traj.parent
        self.on_event("snapshot", {"iteration": a.iteration, "status": status, "reason": reason, "speedup": speedup})
        traj.attempt = Attempt(a.iteration + 1)
        if self.target_speedup and speedup and speedup >= self.target_speedup:
            self._finish(traj, f"reached the target speedup {self.target_speedup}x")
        elif self.target_roofline and a.profile and (a.profile.roofline_fraction or 0) >= self.target_roofline:
            self._finish(traj, f"reached {self.target_roofline:.0%} of the roofline")
        return PhaseResult("snapshot", snap, snap.correct, snap.summary())

    # --- helpers -------------------------------------------------------------------
    def _keep_verified(self, traj: Trajectory) -> None:
        """A budget ran out after the attempt in flight passed the whole suite: snapshot it (with its tuned config if
        tuning finished, else its verified default) rather than lose a correct kernel."""
        a = traj.attempt
        if a.failure is not None or a.test is None or a.test.status != "correct":
            return
        if a.tuned is None:
            a.tuned = TuneResult({}, a.test, [], measured=bool(a.test.timing and a.test.timing.measured),
                                 note="not tuned: the budget was spent")
        self._snapshot(traj)

    def _plan_lessons(self, traj: Trajectory) -> str:
        """Plans that worked in earlier runs on similar tasks for this target (computed once per trajectory)."""
        if self.lessons is None:
            return ""
        if traj.plan_lessons is None:
            from mk.lessons import recall, task_words

            traj.plan_lessons = recall(self.lessons, task_words(traj.task), kind="plan", target=self.target,
                                       exclude_run=traj.run_id) if self.lessons.lessons(kind="plan", target=self.target) else ""
        return traj.plan_lessons

    def _fail(self, traj: Trajectory, phase: str, status: str, reason: str, res: EvalResult | None = None) -> PhaseResult:
        a = traj.attempt
        a.failure = (phase, status, reason)
        a.next_phase = "snapshot"
        return PhaseResult(phase, res, False, f"{status}: {reason}")

    def _record(self, traj: Trajectory, snap: Snapshot) -> None:
        if self.store is None or not traj.run_id:
            return
        res = snap.result
        timings = res.timing.model_dump() if res is not None and res.timing else {}
        prof = {"report": snap.profile.model_dump() if snap.profile else None, "config": snap.config, "tuning": snap.tuning_note,
                "failed_phase": snap.failed_phase, "feedback": snap.feedback}
        if snap.node_id:
            self.store.update_node(snap.node_id, status=snap.status, reason=snap.reason, speedup=snap.speedup)
        self.store.add_snapshot(traj.run_id, snap.node_id, snap.iteration, code=snap.source, plan=snap.rationale, status=snap.status,
                                speedup=snap.speedup, timings=timings, profile=prof)
        if res is not None:
            self.store.record_evaluation(run_id=traj.run_id, node_id=snap.node_id, task_name=res.task, status=snap.status,
                                         reason=snap.reason, suite_hash=traj.suite.hash, speedup=snap.speedup,
                                         result_json=res.model_dump_json())

    def _finish(self, traj: Trajectory, reason: str) -> None:
        """End the trajectory with one stop reason: the same words in the run's row, the report and the CLI."""
        declined = self.author.declined or {}
        if not traj.snapshots and declined and "no further proposals" in reason:  # the author proposed nothing: say why

            reason = declined_reason(declined)
        best = traj.best
        if best is not None:
            reason += f"; best: {best.proposal}" + (f" ({best.speedup:.2f}x)" if best.speedup is not None else " (speed not measured)")
        traj.done, traj.stop_reason = True, reason
        if traj.run is not None:
            traj.run.store = self.store if self.store is not None else traj.run.store
            traj.run.finish(traj.status, reason)
        elif self.store is not None and traj.run_id:
            self.store.finish_run(traj.run_id, traj.status, reason)
