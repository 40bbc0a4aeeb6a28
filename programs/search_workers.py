"""The worker side of Search: one node = one short Auto session, run anywhere.

A worker gets a :class:`NodeJob` (plain, picklable values: where to load the
task, the frozen suite, the author, the node's first plan, what its lineage
learned) and returns a :class:`NodeResult` (plain values again). Workers never
open the store: DuckDB allows one writing process, so the orchestrator writes.

Backends (:func:`make_pool`): ``inline`` (this process, one node at a time),
``process`` (a ``concurrent.futures.ProcessPoolExecutor`` with the spawn
context, the default) and ``ray`` (a private local instance, or an existing cluster named by ``$RAY_ADDRESS``;
``pip install "mk[ray]"``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import multiprocessing
import os
import sys
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from mk.authors import make_author
from mk.errors import ConfigError
from mk.harness.results import EvalResult

log = logging.getLogger(__name__)


def code_hash(source: str) -> str:
    """The identity of a candidate's code (the same hash Auto and the store use)."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


# --- authors ---------------------------------------------------------------------


def author_spec(author: Any) -> str | None:
    """A string that rebuilds ``author`` in another process or a later `mk resume`, or None (see
    :func:`mk.run.config.author_spec`)."""
    from mk.run.config import author_spec as spec

    return spec(author) or None


class BranchAuthor:
    """Wraps an author for one search node.

    The node's first plan was chosen by the orchestrator (so siblings differ);
    later plans come from the inner author with the lineage's summaries and the
    branch hint prepended to its feedback. A plan whose name the lineage or a
    sibling already took is asked again (a bounded number of times): the
    offline author then yields its next template, an LM author reads the hint.
    """

    def __init__(self, inner: Any, *, first_plan: Any = None, lineage: str = "", hint: str = "",
                 avoid: Sequence[str] = (), max_replans: int = 8):
        self.inner = inner
        self.name = inner.name
        self.first_plan = first_plan
        self.lineage = lineage
        self.hint = hint
        self.avoid = set(avoid)
        self.max_replans = max_replans

    def _ctx(self, ctx: Any) -> Any:
        parts = [p for p in (self.lineage and f"What the ancestors of this search node tried:\n{self.lineage}", self.hint, ctx.feedback) if p]
        return dataclasses.replace(ctx, feedback="\n".join(parts))

    def plan(self, ctx: Any) -> Any:
        if self.first_plan is not None:
            plan, self.first_plan = self.first_plan, None
        else:
            plan = choose_plan(self.inner, self._ctx(ctx), self.avoid, self.max_replans)
        if plan is not None:
            self.avoid.add(plan.name)
        return plan

    def implement(self, ctx: Any, plan: Any) -> Any:
        return self.inner.implement(self._ctx(ctx), plan)

    def fix(self, ctx: Any, proposal: Any, error: str) -> Any:
        return self.inner.fix(self._ctx(ctx), proposal, error)

    def analyse(self, ctx: Any, report: Any) -> str:
        return self.inner.analyse(self._ctx(ctx), report)


def choose_plan(author: Any, ctx: Any, avoid: set[str], max_replans: int = 8) -> Any:
    """The author's next plan whose name is not in ``avoid`` (or its last answer after ``max_replans`` repeats)."""
    plan = author.plan(ctx)
    tries = 0
    while plan is not None and plan.name in avoid and tries < max_replans:
        tries += 1
        plan = author.plan(ctx)
    return plan


# --- jobs and results -------------------------------------------------------------


@dataclass
class NodeJob:
    """Everything a worker needs for one node; plain values so it crosses processes."""

    key: str
    suite: Any
    target: str
    author: Any  # spec string, factory or instance (see make_author)
    first_plan: Any
    lineage: str = ""
    hint: str = ""
    avoid: tuple[str, ...] = ()
    known: Mapping[str, str] = field(default_factory=dict)  # code hash -> node key already evaluated
    iterations: int = 1
    tune: bool = True
    max_trials: int = 6
    max_fixes: int = 2
    evaluate: Callable[..., EvalResult] | None = None
    task_locator: Mapping[str, str] | None = None
    #: the run's scales (``mk.task.Scale`` values, or names of the task file's own): a synthesised scale is not in the file
    scales: tuple[Any, ...] = ()
    task: Any = None  # the Task itself, for inline workers only (callables do not cross processes)
    #: wall-clock time (``time.time()``) after which the node stops between phases (the search's time budget)
    deadline: float | None = None
    #: the store's live lessons for this target (a worker holds no store): recalled by the node's fixer and planner
    lessons: tuple[dict[str, Any], ...] = ()


@dataclass
class SnapRecord:
    iteration: int
    name: str
    rationale: str
    source: str
    code_hash: str
    config: dict[str, Any]
    status: str
    reason: str
    speedup: float | None
    failed_phase: str | None
    summary: str
    timings: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    result_json: str | None = None
    task_name: str = ""


@dataclass
class NodeResult:
    key: str
    plans: list[str]
    snapshots: list[SnapRecord]
    stop_reason: str
    error: str | None = None
    #: the LM calls the node's author made in the worker (mk.lm.LMCall fields), for the orchestrator to store
    lm_calls: list[dict[str, Any]] = field(default_factory=list)
    #: lessons the node learnt (mk.lessons.LessonBuffer.new), for the orchestrator to keep with the node's id
    lessons: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> SnapRecord | None:
        from mk.run.best import best_of

        return best_of(self.snapshots)

    @property
    def head(self) -> SnapRecord | None:
        """The node's representative snapshot: the best correct one, else the last evaluated one."""
        if self.best is not None:
            return self.best
        tried = [s for s in self.snapshots if s.source and not s.reason.startswith(DUPLICATE)]
        return tried[-1] if tried else (self.snapshots[-1] if self.snapshots else None)


DUPLICATE = "duplicate of search node"


class _DedupEvaluate:
    """Refuse to evaluate code another node already evaluated (same hash): a typed verdict, no harness run."""

    def __init__(self, evaluate: Callable[..., EvalResult], known: Mapping[str, str]):
        self.evaluate, self.known = evaluate, dict(known)

    def __call__(self, task: Any, candidate: Any, **kw: Any) -> EvalResult:
        h = code_hash(candidate.source)
        if h in self.known:
            return EvalResult(status="rejected", reason=f"{DUPLICATE} {self.known[h]} (identical code, not evaluated again)",
                              task=task.name, target=kw.get("target", ""), candidate_digest=h)
        return self.evaluate(task, candidate, **kw)


def _load_task(job: NodeJob) -> Any:
    if job.task is not None:
        return job.task
    from mk.loaders import load_task

    task = load_task(dict(job.task_locator or {}))
    if job.scales:  # the run's own scales, the author's synthesised ones among them (the task file has not those)
        task = task.with_scales({s: task.scale(s) for s in job.scales} if all(isinstance(s, str) for s in job.scales)
                                else {s.name: s for s in job.scales})
    return task


def run_node(job: NodeJob) -> NodeResult:
    """Run one node's Auto session (store=None) and return its snapshots as plain values (and its LM calls)."""
    from mk.scopes import node_scope

    with node_scope(f"pending:{job.key}"):  # the node's id is known once the orchestrator writes it
        return _run_node(job)


def _run_node(job: NodeJob) -> NodeResult:
    from mk.lessons import LessonBuffer
    from mk.programs.auto import Auto

    inner, before = None, 0
    try:
        task = _load_task(job)
        inner = make_author(job.author)
        before = len(getattr(getattr(inner, "accountant", None), "calls", []))
        author = BranchAuthor(inner, first_plan=job.first_plan, lineage=job.lineage, hint=job.hint, avoid=job.avoid)
        if job.evaluate is None:
            from mk.harness.evaluate import evaluate as real_evaluate
        evaluate = _DedupEvaluate(job.evaluate or real_evaluate, job.known)
        budget = None
        if job.deadline is not None:
            import time

            from mk.budget import Budget, BudgetMeter

            budget = BudgetMeter(Budget(max_wall_s=max(0.0, job.deadline - time.time())))
        learnt = LessonBuffer(job.lessons)
        auto = Auto(author, target=job.target, iterations=job.iterations, evaluate=evaluate, store=None, tune=job.tune,
                    max_trials=job.max_trials, max_fixes=job.max_fixes, budget=budget, lessons=learnt)
        traj = auto.run(task, suite=job.suite)
    except Exception as exc:  # a worker failure is data: the node records it and the search goes on
        log.warning("search node %s failed: %s", job.key, exc)
        return NodeResult(job.key, [], [], "worker failed", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}",
                          lm_calls=_calls_of(inner, before))
    snaps = []
    for s in traj.snapshots:
        res = s.result
        snaps.append(SnapRecord(
            s.iteration, s.proposal, s.rationale, s.source, code_hash(s.source) if s.source else "", dict(s.config), s.status,
            s.reason, s.speedup, s.failed_phase, s.summary(),
            timings=res.timing.model_dump() if res is not None and res.timing else {},
            profile={"report": s.profile.model_dump() if s.profile else None, "config": s.config, "tuning": s.tuning_note,
                     "failed_phase": s.failed_phase},
            result_json=res.model_dump_json() if res is not None else None, task_name=res.task if res is not None else task.name,
        ))
    plans = [s.proposal for s in traj.snapshots]
    return NodeResult(job.key, plans, snaps, traj.stop_reason, lm_calls=_calls_of(inner, before), lessons=learnt.new)


def _calls_of(author: Any, before: int = 0) -> list[dict[str, Any]]:
    """The LM calls ``author`` made in this node (from index ``before`` of its accountant's list) that no store has
    recorded yet: a worker process has no store, so the orchestrator writes them."""
    accountant = getattr(author, "accountant", None)
    if accountant is None or getattr(accountant, "store", None) is not None:
        return []  # no model, or an inline author whose accountant records into the run's store itself
    return [dataclasses.asdict(c) for c in accountant.calls[before:]]


# --- pools ----------------------------------------------------------------------


class Pool:
    """Runs NodeJobs; ``run(jobs)`` yields NodeResults as they complete."""

    name = "pool"

    def run(self, jobs: Sequence[NodeJob]) -> Iterator[NodeResult]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def abort(self) -> None:
        self.close()


class InlinePool(Pool):
    name = "inline"

    def run(self, jobs: Sequence[NodeJob]) -> Iterator[NodeResult]:
        for job in jobs:
            yield run_node(job)


class ProcessPool(Pool):
    name = "process"

    def __init__(self, max_workers: int):
        self._ex = ProcessPoolExecutor(max_workers=max_workers, mp_context=multiprocessing.get_context("spawn"))

    def run(self, jobs: Sequence[NodeJob]) -> Iterator[NodeResult]:
        pending: dict[Future, NodeJob] = {self._ex.submit(run_node, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                job = pending.pop(fut)
                try:
                    yield fut.result()
                except Exception as exc:  # the worker process died (e.g. killed for memory)
                    yield NodeResult(job.key, [], [], "worker process failed", error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._ex.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Stop now (Ctrl-C): the nodes in flight are lost anyway (a resume runs them again), so do not wait."""
        for proc in list(getattr(self._ex, "_processes", {}).values()):
            proc.terminate()
        self._ex.shutdown(wait=False, cancel_futures=True)


#: the driver's environment variables a Ray worker gets (an existing cluster's workers start with the raylet's
#: environment, not the driver's): mk's settings and the LM's credentials and endpoints, so an LM author rebuilt
#: from its spec in a worker reaches the same model as the driver
RAY_FORWARDED_ENV = ("MK_", "GEMINI_", "GOOGLE_", "VERTEX", "OPENAI_", "ANTHROPIC_", "LITELLM_", "DSPY_")
_NOT_FORWARDED = ("MK_REQUEST_FD", "MK_REPLY_FD", "MK_DB")  # a judge child's pipe numbers; the store stays with the driver

#: how often Ray runs a node again after its worker process or its machine died (a node's result is plain data and
#: a worker writes nothing, so a node run again from the start is the same node); a node's own exception is not retried
RAY_NODE_RETRIES = 3


def forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: this process's) that :class:`RayPool` passes to its workers."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith(RAY_FORWARDED_ENV) and k not in _NOT_FORWARDED}


def ray_address(address: str | None = None) -> str | None:
    """The cluster a Ray search joins: ``address``, else ``$RAY_ADDRESS``, else None (a private local instance)."""
    return address or os.environ.get("RAY_ADDRESS") or None


class RayPool(Pool):
    """Nodes as Ray tasks. Without an address (``ray_address=`` / ``$RAY_ADDRESS``) a private local instance with
    ``max_workers`` CPUs is started and stopped with the pool (never a cluster some other program started on this
    machine); with one, the pool joins that cluster as a driver and Ray places the nodes on its machines.

    A node whose worker process or machine dies is run again by Ray (:data:`RAY_NODE_RETRIES` times); one that
    still fails is recorded as a failed node and the search goes on."""

    name = "ray"

    def __init__(self, max_workers: int, address: str | None = None):
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("the ray backend needs Ray, which is not installed", hint='pip install "mk[ray]"') from exc
        self._ray = ray
        self._started = not ray.is_initialized()
        address = ray_address(address)
        if self._started:
            env = forwarded_env()
            if not address:  # a local instance's workers see the driver's import path (task modules, author factories)
                env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            kwargs: dict[str, Any] = {"num_cpus": max_workers, "include_dashboard": False} if not address else {}
            try:
                ray.init(address=address or "local", ignore_reinit_error=True, log_to_driver=False,
                         runtime_env={"env_vars": env}, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                if not address:
                    raise
                raise ConfigError(f"cannot join the Ray cluster at {address}: {exc}",
                                  hint="check RAY_ADDRESS (host:port of the head's GCS, or ray://host:10001), that the "
                                       "head is up, and the cluster's token (RAY_AUTH_TOKEN) where it uses one") from exc
            log.info("search nodes run on Ray %s", f"cluster {address}" if address else "local instance")
        self._remote = ray.remote(max_retries=RAY_NODE_RETRIES, retry_exceptions=False)(run_node)

    def run(self, jobs: Sequence[NodeJob]) -> Iterator[NodeResult]:
        ray = self._ray
        refs = {self._remote.remote(job): job for job in jobs}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                job = refs.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as exc:  # the node's worker or machine died more often than Ray retries it
                    log.warning("search node %s lost on Ray: %s", job.key, exc)
                    yield NodeResult(job.key, [], [], "ray task failed", error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self._started:  # a local instance this pool started goes away with it; a cluster's driver disconnects
            self._ray.shutdown()


def make_pool(workers: str, max_workers: int, *, ray_address: str | None = None) -> Pool:
    if workers == "inline" or (workers == "process" and max_workers <= 1):
        return InlinePool()
    if workers == "process":
        return ProcessPool(max_workers)
    if workers == "ray":
        return RayPool(max_workers, ray_address)
    raise ConfigError(f"unknown worker backend {workers!r}", hint="choose inline, process or ray")
