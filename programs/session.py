"""Human in the loop: one phase at a time, with a person between phases.

A :class:`Session` drives :class:`mk.programs.auto.Auto` through
``Auto.start``/``Auto.step``. After each phase the person can look at what it
produced (``session.artifact``, rendered with rich in a notebook or a terminal),
rewrite the plan (:meth:`Session.edit_plan`) or the code
(:meth:`Session.edit_code`; edited code goes through the same validate and test
phases, the same frozen suite and the same judge as authored code), run the
last phase again (:meth:`Session.redo`) or go on (:meth:`Session.approve`).

Everything is persisted by Auto's own store writes under a run with mode
``"hitl"``; the run's config also records where the task lives and which scales
were kept, so :meth:`Session.resume` can rebuild the session in another process:
it reloads the task, checks that the frozen suite hash is unchanged, restores the
completed snapshots and continues at the next plan. The store is opened only
while a phase runs, so a notebook does not hold the DuckDB lock between phases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from pathlib import Path
from typing import Any, Callable, Iterator

from mk.author.proposal import Proposal
from mk.budget import Budget
from mk.errors import ConfigError
from mk.harness.results import EvalResult, trial_status
from mk.profile import ProfileReport
from mk.programs.auto import Attempt, Auto, PhaseResult, Plan, Snapshot, Trajectory
from mk.task import Task
from mk.tuning.autotune import TuneResult

log = logging.getLogger(__name__)

MODE = "hitl"


@dataclasses.dataclass
class StepResult(PhaseResult):
    """A :class:`PhaseResult` that renders itself (rich in a terminal, HTML in a notebook)."""

    def __rich__(self) -> Any:
        return render(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return _mimebundle(render(self))


class Session:
    """An interactive optimisation trajectory for ``task`` (a Task or anything :func:`mk.loaders.load_task` takes)."""

    def __init__(
        self,
        task: Any,
        *,
        target: str = "tpu",
        author: Any = None,
        db: Any = None,
        scale: str | None = None,
        iterations: int = 4,
        tune: bool = True,
        max_trials: int = 6,
        max_fixes: int = 2,
        evaluate: Callable[..., EvalResult] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        budget: Any = None,
        out: str | Path | None = None,
        _resume: dict[str, Any] | None = None,
    ):
        from mk.loaders import load_task

        task = load_task(task)
        if scale:
            task = task.with_scales({scale: task.scale(scale)})
        self.task: Task = task
        self.target = target
        self.author = author if author is not None else _offline_author()
        self.history: list[StepResult] = []
        self._db, self._shared = _store_spec(db)
        from mk.budget import BudgetMeter

        meter = budget if isinstance(budget, BudgetMeter) or budget is None else BudgetMeter(budget)
        self._auto = Auto(SkipTried(self.author, _resume["tried"] if _resume else []), target=target, iterations=iterations,
                          evaluate=evaluate, tune=tune, max_trials=max_trials, max_fixes=max_fixes, on_event=on_event,
                          budget=meter if meter is not None else self._auto_meter())
        from mk.run import Run, RunConfig
        from mk.run.config import author_fields

        with self._bound_store() as store:
            if _resume:
                self.run = _resume["run"]
                self.run.store = store
                if meter is not None:
                    self.run.set_config(budget=meter.budget)
                self.run.restart()
            else:
                self.run = Run.create(store, task, RunConfig(
                    mode=MODE, target=target, **author_fields(self.author), iterations=iterations, tune=tune,
                    max_trials=max_trials, max_fixes=max_fixes, budget=meter.budget if meter is not None else Budget(),
                    out=str(Path(out).expanduser().resolve()) if out else None), meter=self._auto.budget)
            try:
                self.traj: Trajectory = self._auto.start(task, run=self.run)
            except Exception as exc:
                self.run.fail_unstarted(exc)
                raise
        self.task = self.traj.task
        if _resume:
            self.traj.snapshots = _resume["snapshots"]
            self.traj.parent = next((s.node_id for s in reversed(self.traj.snapshots) if s.node_id), None)
            self.traj.attempt = Attempt(max((s.iteration for s in self.traj.snapshots), default=0) + 1)

    def _auto_meter(self) -> Any:
        from mk.contracts import as_author

        return as_author(self.author).meter

    # --- resuming ------------------------------------------------------------------
    @classmethod
    def resume(cls, run_id: str, *, db: Any = None, author: Any = None, iterations: int | None = None,
               evaluate: Callable[..., EvalResult] | None = None,
               on_event: Callable[[str, dict[str, Any]], None] | None = None, budget: Any = None) -> "Session":
        """Rebuild the session of ``run_id`` from the store and continue at the next plan (``budget``: a new
        :class:`mk.budget.Budget` for what is left to do). The task is loaded again with the run's own scales and
        its frozen suite must be unchanged; the author is rebuilt from the run's spec unless ``author`` is given."""
        from mk.run import Run
        from mk.authors import build_author
        from mk.run.restore import restore_snapshots

        spec, shared = _store_spec(db)
        with _open(spec, shared) as store:
            run = Run.reopen(store, run_id)
            snapshots = restore_snapshots(store, run.id)
            if author is None:
                author = build_author(run.config.author, store=store, run_id=run.id, name=run.config.author_name)
        cfg = run.config
        if iterations:
            run.config = cfg.replace(iterations=iterations)
        return cls(run.task, target=cfg.target, author=author, db=db, iterations=iterations or cfg.iterations,
                   tune=cfg.tune, max_trials=cfg.max_trials, max_fixes=cfg.max_fixes, evaluate=evaluate, on_event=on_event,
                   budget=budget, _resume={"run": run, "snapshots": snapshots, "tried": [s.proposal for s in snapshots]})

    # --- state ---------------------------------------------------------------------
    @property
    def run_id(self) -> str | None:
        return self.traj.run_id

    @property
    def attempt(self) -> Attempt:
        return self.traj.attempt

    @property
    def next_phase(self) -> str | None:
        return None if self.traj.done else self.traj.attempt.next_phase

    @property
    def done(self) -> bool:
        return self.traj.done

    @property
    def snapshots(self) -> list[Snapshot]:
        return self.traj.snapshots

    @property
    def best(self) -> Snapshot | None:
        return self.traj.best

    @property
    def last(self) -> StepResult | None:
        return self.history[-1] if self.history else None

    @property
    def artifact(self) -> Any:
        """What the last phase produced: a Plan, Proposal, EvalResult, TuneResult, ProfileReport or Snapshot."""
        return self.last.artifact if self.last else None

    # --- driving -------------------------------------------------------------------
    def step(self) -> StepResult:
        """Run the next phase and return what it produced."""
        with self._bound_store():
            res = self._auto.step(self.traj)
        return self._record(res)

    def approve(self) -> StepResult:
        """Accept what the last phase produced and run the next one."""
        return self.step()

    def run_to_end(self) -> Snapshot | None:
        """Run the remaining phases without stopping; return the best snapshot."""
        while not self.done:
            self.step()
        return self.best

    def edit_plan(self, text: str) -> Plan:
        """Replace the plan's text; the author implements the edited plan (again, if code was already written)."""
        a = self._live_attempt("edit the plan")
        if a.plan is None:
            raise ConfigError("there is no plan to edit yet", hint="run session.step() to get the author's plan first")
        a.plan = Plan(a.plan.name, text, a.plan.data)
        if a.next_phase != "implement":
            a.failure, a.fixes, a.next_phase = None, 0, "implement"
        if a.node_id:
            with self._store() as store:
                store.update_node(a.node_id, plan=text)
        return a.plan

    def edit_code(self, source: str) -> StepResult:
        """Replace the candidate's source; it is validated and tested next, by the same judge as authored code."""
        a = self._live_attempt("edit the code")
        if a.plan is None:
            raise ConfigError("there is no plan yet to attach hand-written code to", hint="run session.step() for a plan first")
        old = a.proposal or Proposal(a.plan.name, "", a.plan.text, "human")
        note = "" if "(code edited by hand)" in old.rationale else " (code edited by hand)"
        a.proposal = Proposal(old.name, source, old.rationale + note, old.template)
        a.failure, a.fixes, a.validation, a.test, a.tuned, a.profile = None, 0, None, None, None, None
        with self._bound_store() as store:
            res = self._auto.accept_code(self.traj, "edit")  # the same node update + candidate build as authored code
            if a.node_id:
                meta = dict((store.get_node(a.node_id) or {}).get("meta") or {})
                meta["human_edits"] = int(meta.get("human_edits", 0)) + 1
                store.update_node(a.node_id, meta=meta)
        return self._record(res)

    def redo(self) -> str:
        """Make the last phase run again at the next step; returns its name."""
        a = self._live_attempt("redo a phase")
        last = self.last
        if last is None or last.phase in ("snapshot", "done", "edit"):
            raise ConfigError(f"there is no phase to redo after {last.phase if last else 'nothing'!r}",
                              hint="step() runs the next phase; edit_code()/edit_plan() change the attempt in flight")
        if last.phase == "plan":
            a.plan, a.proposal, a.candidate = None, None, None
        a.failure, a.next_phase = None, last.phase
        return last.phase

    def outcome(self, status: str | None = None) -> Any:
        """How the session stands, as every mode reports it (:class:`mk.run.service.Outcome`)."""
        from mk.run.restore import outcome_of

        reason = self.traj.stop_reason or f"stopped by the user after {len(self.snapshots)} snapshots (resume: {self.run.resume_command()})"
        return outcome_of(self.traj, self.author, status, reason)

    def save(self, path: str | Path) -> Path:
        """Write the best kernel (with mk's provenance header and its tuned config) to ``path``."""
        from mk.harness.envelope import Envelope
        from mk.run.output import with_provenance
        from mk.targets import get_target

        best = self.best
        if best is None:
            raise ConfigError("this session has no correct kernel to save yet", hint="step further, or edit the code")
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(with_provenance(best, self.task, self.traj.suite_hash, get_target(self.target),
                                         Envelope.of(self.task, self.traj.suite, compiled=best.covered)))
        except OSError as exc:
            raise ConfigError(f"cannot write the kernel to {p}: {exc}",
                              hint=f"save to a writable path; the session is kept in the store (run {self.run_id})") from None
        return p

    # --- display -------------------------------------------------------------------
    def __rich__(self) -> Any:
        return render_session(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return _mimebundle(render_session(self))

    def __repr__(self) -> str:
        return (f"Session(task={self.task.name!r}, target={self.target!r}, run={self.run_id}, snapshots={len(self.snapshots)}, "
                f"next={self.next_phase})")

    # --- helpers -------------------------------------------------------------------
    def _live_attempt(self, what: str) -> Attempt:
        if self.traj.done:
            raise ConfigError(f"the session has finished ({self.traj.stop_reason}); cannot {what}",
                              hint="Session.resume(run_id, iterations=...) continues it with a larger iteration limit")
        return self.traj.attempt

    def _store(self) -> contextlib.AbstractContextManager[Any]:
        return _open(self._db, self._shared)

    def interrupt(self, resume: str | None = None) -> KeyboardInterrupt:
        """Mark this session's run interrupted (Ctrl-C) and return the exception to raise; its message names the
        run, what is kept and ``resume``, the command that continues it (default ``mk hitl --resume RUN``)."""
        with self._store() as store:
            return store.interrupt_run(self.run_id, f"its {len(self.snapshots)} snapshots are kept",
                                       resume or self.run.resume_command())

    @contextlib.contextmanager
    def _bound_store(self) -> Iterator[Any]:
        """The store, lent to Auto for the duration of one phase (Auto writes nodes, evaluations and trials to it)."""
        with self._store() as store:
            self._auto.store = store
            run = getattr(self, "run", None)
            if run is not None:
                run.store = store
            try:
                yield store
            finally:
                self._auto.store = None

    def _record(self, res: PhaseResult) -> StepResult:
        out = StepResult(res.phase, res.artifact, res.ok, res.message)
        self.history.append(out)
        return out


# --- the author, as seen on a resumed session ----------------------------------------------
class SkipTried:
    """Delegates to ``author``; on a resumed session, skips a plan named like one already snapshotted (once per name)."""

    def __init__(self, author: Any, tried: list[str]):
        self._author, self._tried = author, list(tried)
        self.name = author.name

    def plan(self, ctx: Any) -> Plan | None:
        plan = self._author.plan(ctx)
        while plan is not None and plan.name in self._tried:
            self._tried.remove(plan.name)
            plan = self._author.plan(ctx)
        return plan

    def __getattr__(self, item: str) -> Any:
        return getattr(self._author, item)


def _offline_author() -> Any:
    from mk.author.adapter import OfflineAuthorAdapter

    return OfflineAuthorAdapter()


# --- the store -------------------------------------------------------------------------------
def _store_spec(db: Any) -> tuple[Any, Any]:
    """(path for per-phase opening, or None) and (a Store kept open: one given, or an in-memory one)."""
    from mk.store import MEMORY, Store

    if isinstance(db, Store):
        return None, db
    if db is not None and str(db) == MEMORY:
        return None, Store.open(MEMORY)
    return db, None


@contextlib.contextmanager
def _open(path: Any, shared: Any) -> Iterator[Any]:
    if shared is not None:
        yield shared
        return
    from mk.store import Store

    with Store.open(path) as store:
        yield store


# --- rendering -------------------------------------------------------------------------------
def render(result: PhaseResult) -> Any:
    """A rich renderable for one phase's result: plan text, code, verdict table, tuning or profile summary."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    art = result.artifact
    style = "green" if result.ok else "red"
    title = f"{result.phase}: {'ok' if result.ok else 'failed'}"
    if isinstance(art, Plan):
        body: Any = Group(Text(art.name, style="bold"), Text(art.text))
    elif isinstance(art, Proposal):
        body = Group(Text(f"{art.name} ({art.template}): {art.rationale}"), Syntax(art.source, "python", line_numbers=True))
    elif isinstance(art, EvalResult):
        body = _verdict(art)
    elif isinstance(art, TuneResult):
        body = _tuning(art)
    elif isinstance(art, ProfileReport):
        body = Text(art.summary())
    elif isinstance(art, Snapshot):
        body = Text(art.summary())
    else:
        body = Text(result.message or "(nothing)")
    named = getattr(art, "name", None)
    if result.message and result.message != named and not isinstance(art, (Snapshot, ProfileReport)) and art is not None:
        body = Group(body, Text(result.message, style="dim"))
    return Panel(body, title=title, border_style=style, title_align="left")


def _verdict(res: EvalResult) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table("case", "scale", "seed", "distribution", "ok", "max abs err", "max rel err", "note")
    for c in res.cases:
        table.add_row(str(c.index), c.scale, str(c.seed), c.distribution, "yes" if c.ok else "NO", _num(c.max_abs), _num(c.max_rel), c.note)
    head = Text(f"verdict: {res.status} - {res.reason}", style="bold green" if res.status == "correct" else "bold red")
    timing = res.timing
    extra = []
    if timing is not None:
        why = timing.reason or "not measured"
        extra.append(Text(f"speedup {timing.speedup:.2f}x" if timing.measured and timing.speedup else
                          f"time {why}" if why.startswith("not ") else f"time: {why}"))
    return Group(head, table, *extra)


def _tuning(tuned: TuneResult) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"config {tuned.config or '{}'}: {tuned.note}")]
    if tuned.trials:
        table = Table("trial", "params", "status", "measured s", "estimated s", "reason")
        for t in tuned.trials:
            est = f"{_num(t.estimated_s)} ({t.estimated_at}, an estimate)" if t.estimated_s is not None else "-"
            table.add_row(str(t.number), str(t.params), trial_status(t.status, t.reason), _num(t.seconds), est, t.reason)
        parts.append(table)
    return Group(*parts)


def render_session(session: Session) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    head = Text(f"HITL session on {session.task.name} for {session.target}; run {session.run_id}; "
                + (f"finished: {session.traj.stop_reason}" if session.done else f"next phase: {session.next_phase} "
                   f"(iteration {session.attempt.iteration})"))
    table = Table("iteration", "proposal", "status", "speedup", "config", "reason")
    best = session.best
    for s in session.snapshots:
        mark = " (best)" if s is best else ""
        table.add_row(str(s.iteration), s.proposal + mark, s.status, _num(s.speedup), str(s.config or ""), s.reason[:80])
    return Group(head, table)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _mimebundle(renderable: Any) -> dict[str, str]:
    from rich.console import Console

    console = Console(record=True, file=io.StringIO(), width=110, force_jupyter=False, force_terminal=False)
    console.print(renderable)
    return {"text/plain": console.export_text(), "text/html": console.export_html(inline_styles=True)}

