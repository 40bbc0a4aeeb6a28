"""Run: the one place a run is created, its suite frozen, and its end recorded.

Every mode goes through it::

    run = Run.create(store, task, RunConfig(mode="auto", target="tpu", ...))   # the run's row, with its config
    task, suite = run.freeze(author)          # the frozen suite (the author's synthesised cases included)
    ...                                       # the mode's own loop writes nodes and snapshots under run.id
    run.finish(outcome_status, reason)        # or run.interrupt(kept) / run.fail(reason)

``Run.reopen(store, run_id)`` is the other way in (``mk resume``, ``mk hitl --resume``): it restores the stored
:class:`RunConfig`, loads the task again from its locator with exactly the stored scales, rebuilds the frozen
suite (synthesised cases come from the config, not from a model) and refuses when its hash changed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from mk.errors import ConfigError, TaskError
from mk.run.config import RunConfig

log = logging.getLogger(__name__)

#: the statuses a finished run can have
STATUSES = ("correct", "no_correct_candidate", "failed", "interrupted", "declined")


@dataclass
class Outcome:
    """How a run ended, whichever mode ran it: what the CLI prints, the report holds and ``mk show`` reads."""

    run_id: str | None
    status: str
    stop_reason: str
    best: Any = None  # mk.run.output.Best
    rows: list[dict[str, Any]] = field(default_factory=list)
    declined: dict[str, str] = field(default_factory=dict)
    best_node: str | None = None  # a search's best node key


class Run:
    """A run in the store (see the module docstring)."""

    def __init__(self, store: Any, run_id: str, config: RunConfig, task: Any, suite: Any = None):
        self.store = store
        self.id = run_id
        self.config = config
        self.task = task
        self.suite = suite

    def __repr__(self) -> str:
        return f"Run({self.id}, mode={self.config.mode}, target={self.config.target}, task={getattr(self.task, 'name', '?')})"

    # --- creating ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, store: Any, task: Any, config: RunConfig, *, meter: Any = None) -> "Run":
        """A new run of ``task`` (status ``running``), its config completed with the task's locator and scales.
        ``meter`` (the run's :class:`mk.budget.BudgetMeter`) counts wall time from the run's recorded ``started_at``:
        the time a stop reason says was spent is the time since the run started, whatever came before."""
        config = config.replace(locator=dict(config.locator or task.locator or {}), scales=tuple(config.scales or task.scales))
        store.upsert_task(task.fingerprint(), task.name, task.kind, str(task.source) if task.source else None, task.describe())
        run_id = store.create_run(task.fingerprint(), config.mode, config.to_dict())
        if meter is not None:
            meter.start_at(store.get_run(run_id)["started_at"])
        log.info("run %s: %s on %s (%s)", run_id, config.mode, task.name, config.target)
        return cls(store, run_id, config, task)

    def freeze(self, author: Any = None, *, suite: Any = None) -> tuple[Any, Any]:
        """Freeze the suite before the first plan and record it with the run: ``(task, suite)``. The author's
        synthesised cases are part of it (``author.prepare``); the task gains a scale per new synthesised shape.
        A ``suite`` given is used as it is (a caller that froze it already)."""
        if author is not None:
            from mk.contracts import as_author

            author = as_author(author)
            author.bind_run(self.id)  # the LM calls from here on (test synthesis included) belong to this run
        synthesized: dict[str, Any] = {}
        if suite is None:
            task, suite, synthesized = freeze_suite(author, self.task, self.config.target)
            self.task = task
        self.suite = suite
        self.store.record_suite(suite.hash, self.task.fingerprint(), [c.key for c in suite.cases])
        changes = {"suite_hash": suite.hash, **({"synthesized": synthesized} if synthesized else {})}
        self.store.update_run_config(self.id, changes)
        self.config = self.config.replace(**changes)
        return self.task, suite

    # --- reopening ---------------------------------------------------------------------------------
    @classmethod
    def reopen(cls, store: Any, ident: str, *, task: Any = None) -> "Run":
        """The run ``ident`` (an id or a unique prefix), with its task reloaded and its suite rebuilt and checked."""
        row = store.find_run(ident)
        config = RunConfig.from_dict(row.get("config") or {}, mode=row.get("mode"))
        if task is None:
            task = _reload_task(store, row, config)
        run = cls(store, row["id"], config, task)
        run.suite = run._rebuild_suite()
        if row.get("task_fingerprint") and run.task.fingerprint() != row["task_fingerprint"]:
            log.warning("the task's reference computes another program than when run %s started; resuming because its frozen "
                        "suite is unchanged", run.id)
        return run

    def _rebuild_suite(self) -> Any:
        from mk.harness.suite import Case, build_suite

        cfg, task = self.config, self.task
        syn = cfg.synthesized or {}
        if syn.get("scales"):
            task = task.with_scales({**task.scales, **{s["name"]: _scale(s) for s in syn["scales"]}})
        extra = [Case(*c) for c in syn.get("cases", [])]
        own = [s for s in (cfg.scales or task.scales) if s in task.scales]
        candidates = [own] if cfg.scales else [[n] for n in task.scales] + ([list(task.scales)] if len(task.scales) > 1 else [])
        suite = None
        for scales in candidates:  # a run from before scales were stored: find the scales its suite had
            kept = task.with_scales({n: task.scales[n] for n in dict.fromkeys([*scales, *(s["name"] for s in syn.get("scales", []))])})
            suite = build_suite(kept, scales=scales, extra_cases=extra)
            if not cfg.suite_hash or suite.hash == cfg.suite_hash:
                task = kept
                break
        if cfg.suite_hash and suite.hash != cfg.suite_hash:
            raise TaskError(f"the task's frozen suite changed since run {self.id} started (was {cfg.suite_hash[:12]}, now "
                            f"{suite.hash[:12]}); results judged on another suite cannot be continued", path=task.source,
                            hint="start a new run on the task as it is now (mk optimize TASK)")
        self.task = task
        return suite

    def restart(self) -> None:
        """Mark a resumed run ``running`` again, in the store and in its progress file (read commands tell a live
        writer from a killed one by that file's pid: until it is rewritten it names the process that died)."""
        # the last stop's reason ("interrupted ... continue it with") is no longer true of a running run
        self.store.execute("UPDATE runs SET status = 'running', reason = NULL, finished_at = NULL WHERE id = ?", [self.id])
        self.store.write_progress(self.id)

    # --- ending ------------------------------------------------------------------------------------
    def finish(self, status: str, reason: str) -> None:
        """Record the run's end: ``status`` (see :data:`STATUSES`) and the one stop reason every surface prints."""
        if status not in STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        self.store.finish_run(self.id, status, reason)

    def fail(self, reason: str) -> None:
        self.finish("failed", reason)

    def fail_unstarted(self, exc: BaseException) -> None:
        """Mark the run ``failed`` when ``exc`` ended it before its suite was frozen (a task whose reference fails
        at its shapes, an unknown dtype ...): nothing was judged, so there is nothing to continue. A run that got
        further is left as it is (``killed`` when read, with its resume command)."""
        if self.suite is not None:
            return
        text = (getattr(exc, "message", None) or str(exc) or type(exc).__name__).splitlines()[0][:500].rstrip(".")
        self.fail(f"the run never started: {type(exc).__name__}: {text}; there is nothing to continue: fix the cause "
                  "and start a new run")

    def interrupt(self, kept: str) -> KeyboardInterrupt:
        """Mark the run interrupted (Ctrl-C, SIGTERM) and return the exception to raise; it names the run, what was
        kept and the exact command that continues it."""
        return self.store.interrupt_run(self.id, kept, self.resume_command())

    def resume_command(self) -> str:
        """The command that continues this run, with the store it lives in when that is not the default one."""
        return resume_command(self.id, self.config.mode, self.config.locator, getattr(self.store, "path", None))

    def set_config(self, **changes: Any) -> None:
        """Change the stored config (a resume with a new budget, a new iteration limit)."""
        stored = {k: v for k, v in self.config.replace(**changes).to_dict().items() if k in changes}
        self.store.update_run_config(self.id, stored)
        self.config = self.config.replace(**changes)


def freeze_suite(author: Any, task: Any, target: str) -> tuple[Any, Any, dict[str, Any]]:
    """Freeze ``task``'s suite with the author's synthesised cases: ``(task, suite, synthesized)`` where
    ``synthesized`` records the new scales and cases for the run's config."""
    import dataclasses

    from mk.harness.suite import build_suite, scale_record

    run_task, extra = author.prepare(task, target) if author is not None else (task, [])
    suite = build_suite(run_task, scales=list(task.scales), extra_cases=extra)
    new = [run_task.scales[n] for n in run_task.scales if n not in task.scales]
    synthesized = {}
    if extra or new:
        synthesized = {"scales": [{**scale_record(s), "static": dict(s.static)} for s in new],
                       "cases": [list(dataclasses.astuple(c)) for c in extra]}
    return run_task, suite, synthesized


def _scale(record: dict[str, Any]) -> Any:
    from mk.task import Scale

    shapes = tuple(tuple(int(d) for d in s) for s in record["shapes"]) if record.get("shapes") else None
    return Scale(record["name"], dims=dict(record.get("dims") or {}), shapes=shapes, static=dict(record.get("static") or {}))


def _reload_task(store: Any, row: dict[str, Any], config: RunConfig) -> Any:
    from mk.loaders import load_task

    locator = dict(config.locator or {})
    if not locator:
        task_row = store.get_task(row["task_fingerprint"]) if row.get("task_fingerprint") else None
        if task_row and task_row.get("source"):
            locator = {"kind": "path", "path": task_row["source"]}
    if not locator:
        raise TaskError(f"run {row['id']} does not record where its task lives, so it cannot be resumed",
                        hint="start a new run on the task (mk optimize TASK)")
    if locator.get("kind") == "callable":
        raise TaskError(f"run {row['id']}'s task was a Python function, so `mk resume` cannot load it",
                        hint=f"continue it from Python: {resume_command(row['id'], row.get('mode'), locator, None)}")
    try:
        task = load_task(locator)
    except TaskError as exc:
        raise TaskError(f"run {row['id']}'s task cannot be loaded again: {exc.message}", path=exc.path,
                        hint="restore the task file, or start a new run") from None
    return task


def check_resumable(row: dict[str, Any]) -> None:
    """A ConfigError when run ``row`` cannot be continued at all (it finished with a result already)."""
    if row.get("status") == "declined":
        raise ConfigError(f"run {row['id']} was declined by its author: {row.get('reason') or ''}", hint="start a new run")


def resume_command(run_id: str, mode: str | None, locator: Any, db: Any) -> str:
    """What continues run ``run_id``: ``mk resume`` (``mk hitl --resume`` for a HITL session), or, for a task that is
    a Python function (``mk.optimize``; no other process can load it), the Python call ``mk.resume``."""
    if isinstance(locator, dict) and locator.get("kind") == "callable":
        where = f", db={str(db)!r}" if db_flag(db) else ""
        return (f"mk.resume({run_id!r}{where}) in this Python process (in another one: mk.resume({run_id!r}, fn, shapes"
                f"{where}, ...) with the function and task arguments given to mk.optimize)")
    flag = db_flag(db)
    if mode == "hitl":
        return f"mk hitl --resume {run_id}{flag}"
    return f"mk resume {run_id}{flag}"


def db_flag(where: Any) -> str:
    """`` --db PATH`` for a resume command when the store is not the default one, else ""."""
    from mk.store import default_path

    if where is None:
        return ""
    return f" --db {where}" if str(Path(where).expanduser().resolve()) != str(Path(default_path()).resolve()) else ""
