"""Search(Auto): a tree of short Auto sessions, one per node, kept in the store.

Algorithms (all level by level, so a run is a deterministic function of its
configuration and the nodes already completed):

- ``parallel``: ``width`` independent deep trajectories; each node continues
  its chain (the child reads its parent's snapshots) for ``depth`` levels.
- ``beam``: the reference is the root; level 1 is ``branches`` children of it;
  each later level expands the ``width`` best nodes of the previous one
  (correct before incorrect, then by speedup) into ``branches`` children.
- ``greedy``: beam with width 1.

A node is one Auto session of ``iterations`` iterations; its representative
snapshot (the fastest correct, else the last one tried) gives the node's code,
verdict and speedup. The orchestrator asks the author for each child's first
plan, one sibling after another, telling it what the siblings and ancestors
chose so the branches differ (a plan whose name was already taken is asked
again); later iterations of a node plan inside the worker with the lineage's
summaries as feedback.

Duplicates: a candidate whose code hash equals code another node already
evaluated is not evaluated again: the worker's judge answers ``rejected``
("duplicate of search node K") without running the harness, and the author
moves on. A node whose every candidate was such a duplicate is stored with
status ``duplicate`` and is not expanded. (Siblings running at the same time do
not see each other's code, so two of them can still evaluate the same source;
the later one to finish is then marked ``duplicate_of`` in its meta.)

Durability: workers return plain values; the orchestrator writes each node,
its snapshots and evaluations in one transaction as soon as it completes, with
its search key in ``meta``. ``Search.resume(run_id)`` (``mk resume RUN``)
rebuilds the configuration from the run's row, reads the completed nodes back
and runs only the missing ones: a kill at any moment loses only nodes in flight.
"""

from __future__ import annotations

import logging
import pickle
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Mapping

from mk.authors import make_author
from mk.errors import ConfigError, StoreError
from mk.run.stop import budget_stop_reason, is_budget_stop
from mk.programs.search_workers import (DUPLICATE, InlinePool, NodeJob, NodeResult, Pool, author_spec, choose_plan,
                                        make_pool)

log = logging.getLogger(__name__)

from mk.programs.search_algorithms import Spec as _Spec, get_algorithm  # noqa: E402

WORKERS = ("process", "inline", "ray")


@dataclass(frozen=True)
class SearchConfig:
    """The search's shape; stored in the run's config so a resume rebuilds it."""

    algorithm: str = "beam"
    width: int = 2
    depth: int = 2
    branches: int = 2
    iterations: int = 1
    target: str = "tpu"
    tune: bool = True
    max_trials: int = 6
    max_fixes: int = 2
    workers: str = "process"
    max_workers: int = 2

    def __post_init__(self) -> None:
        get_algorithm(self.algorithm)
        if self.workers not in WORKERS:
            raise ConfigError(f"unknown worker backend {self.workers!r}", hint=f"choose one of {', '.join(WORKERS)}")
        for name in ("width", "depth", "branches", "iterations", "max_workers"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"search {name} must be at least 1, got {getattr(self, name)}")

    @property
    def beam_width(self) -> int:
        return 1 if self.algorithm == "greedy" else self.width

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SearchConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class NodeRecord:
    """A completed search node as the store holds it."""

    key: str
    node_id: str
    parent_key: str | None
    depth: int
    status: str
    reason: str
    speedup: float | None
    code: str
    plan: str
    plans: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # the tuned config of the node's kept kernel

    @property
    def expandable(self) -> bool:
        return self.status not in ("duplicate", "crashed", "stopped") and bool(self.code)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "NodeRecord":
        meta = row.get("meta") or {}
        return cls(meta.get("key", row["id"]), row["id"], meta.get("parent_key"), int(row.get("depth") or 0), row.get("status") or "",
                   row.get("reason") or "", row.get("speedup"), row.get("code") or "", meta.get("first_plan", ""),
                   list(meta.get("plans", [])), list(meta.get("summaries", [])), list(meta.get("hashes", [])),
                   dict(meta.get("config") or {}))


@dataclass
class SearchResult:
    run_id: str
    config: SearchConfig
    nodes: list[NodeRecord]
    stop_reason: str

    @property
    def best(self) -> NodeRecord | None:
        return best_node(self.nodes)

    @property
    def status(self) -> str:
        return "correct" if self.best else "no_correct_candidate"

    def lineage(self, node: NodeRecord | None) -> list[NodeRecord]:
        """The chain from a level-1 node down to ``node``."""
        if node is None:
            return []
        by_key = {n.key: n for n in self.nodes}
        chain = [node]
        while chain[-1].parent_key and chain[-1].parent_key in by_key:
            chain.append(by_key[chain[-1].parent_key])
        return chain[::-1]


def best_node(nodes: list[NodeRecord]) -> NodeRecord | None:
    from mk.run.best import best_of

    return best_of(nodes)


class Search:
    """Search over Auto sessions. ``author`` is ``"offline"``, an importable factory (``"pkg.mod:Name"``), a
    factory (class or function) or an author instance (copied per node); pass a factory or spec for process/Ray workers."""

    def __init__(self, author: Any, *, config: SearchConfig | None = None, evaluate: Callable[..., Any] | None = None,
                 store: Any = None, on_event: Callable[[str, dict[str, Any]], None] | None = None,
                 ray_address: str | None = None, budget: Any = None, **options: Any):
        from mk.budget import BudgetMeter

        self.author = author
        #: the run's budget (a Budget or BudgetMeter): checked before every level and every node's plan; its wall
        #: time also reaches every node as a deadline, so a node stops between phases like an auto run
        self.budget = budget if isinstance(budget, BudgetMeter) or budget is None else BudgetMeter(budget)
        self.config = config or SearchConfig(**options)
        if config is not None and options:
            self.config = SearchConfig.from_dict({**config.to_dict(), **options})
        self.evaluate = evaluate
        self.store = store
        self.on_event = on_event or (lambda kind, data: None)
        self.ray_address = ray_address

    # --- entry points ----------------------------------------------------------------
    def run(self, task: Any, *, suite: Any = None, run: Any = None) -> SearchResult:
        """Search ``task``. ``run`` (a :class:`mk.run.Run` in mode ``search``) is the run to drive; without one it is
        created here through the run service. The suite is frozen first (with the author's synthesised cases)."""
        from mk.run import Run, RunConfig
        from mk.run.config import author_fields

        cfg = self._effective_config(task)
        with self._store() as store:
            if run is None:
                run = Run.create(store, task, RunConfig(
                    mode="search", target=cfg.target, **author_fields(self.author), iterations=cfg.iterations, tune=cfg.tune,
                    max_trials=cfg.max_trials, max_fixes=cfg.max_fixes, settings=cfg.to_dict(),
                    evaluate=None if self.evaluate is None else (author_spec(self.evaluate) or "custom")))
            else:
                run.store = store
                run.set_config(settings=cfg.to_dict(), **({} if self.evaluate is None else
                                                          {"evaluate": author_spec(self.evaluate) or "custom"}))
            if run.suite is None:
                run.freeze(make_author(self.author) if suite is None else None, suite=suite)
            return self._drive(run, cfg)

    @classmethod
    def resume(cls, run_id: str, *, store: Any, author: Any = None, evaluate: Callable[..., Any] | None = None, task: Any = None,
               on_event: Callable[[str, dict[str, Any]], None] | None = None, budget: Any = None, **overrides: Any) -> "SearchResult":
        """Continue ``run_id`` from what the store holds: completed nodes are read back, missing ones run."""
        from mk.run import Run

        row = store.get_run(run_id)
        if row is None:
            raise StoreError(f"no run {run_id!r} in {store.path}", hint="`mk runs` lists the runs and their ids")
        if row.get("mode") != "search":
            raise ConfigError(f"run {run_id} is a {row.get('mode')!r} run, not a search", hint="only search runs can be resumed")
        run = Run.reopen(store, run_id, task=task)
        conf = run.config
        author = author if author is not None else (conf.author or None)
        if author is None:
            raise ConfigError(f"run {run_id} was started with an author that cannot be rebuilt from the store",
                              hint="pass author= (a factory) to Search.resume")
        ev_spec = conf.evaluate
        if evaluate is None and ev_spec:
            if ev_spec == "custom" or ":" not in ev_spec:
                raise ConfigError(f"run {run_id} used a custom evaluate function that cannot be rebuilt", hint="pass evaluate=")
            import importlib

            module, _, name = ev_spec.partition(":")
            evaluate = getattr(importlib.import_module(module), name)
            log.warning("resuming with the run's own evaluate function %s, not the default harness", ev_spec)
        cfg = SearchConfig.from_dict({**conf.settings, **overrides})
        search = cls(author, config=cfg, evaluate=evaluate, store=store, on_event=on_event, budget=budget)
        return search._drive(run, search._effective_config(run.task))

    # --- the loop ---------------------------------------------------------------------
    def _effective_config(self, task: Any) -> SearchConfig:
        cfg = self.config
        if cfg.workers == "inline" or (cfg.workers == "process" and cfg.max_workers <= 1):
            return cfg
        if not task.locator or task.locator.get("kind") == "callable":
            log.warning("task %s has no locator another process can load; running its search nodes inline", task.name)
            return SearchConfig.from_dict({**cfg.to_dict(), "workers": "inline"})
        for what, obj in (("author", self._worker_author()), ("evaluate", self.evaluate)):
            try:
                pickle.dumps(obj)
            except Exception as exc:
                raise ConfigError(f"the {what} cannot be sent to {cfg.workers} workers: {exc}",
                                  hint=f"pass a module-level {what} (or a factory / 'offline' for the author), or workers='inline'") from exc
        return cfg

    def _drive(self, run: Any, cfg: SearchConfig) -> SearchResult:
        store, run_id, task, suite = run.store, run.id, run.task, run.suite
        done = {n.key: n for n in (NodeRecord.from_row(r) for r in store.nodes(run_id)) if n.key}
        self.on_event("search", {"run_id": run_id, "algorithm": cfg.algorithm, "resumed_nodes": len(done)})
        pool = make_pool(cfg.workers, cfg.max_workers, ray_address=self.ray_address)
        spent = None
        try:
            specs = self._first_level(cfg)
            for depth in range(1, cfg.depth + 1):
                spent = self._spent()
                if spent:
                    break
                level = self._run_level(store, run_id, task, suite, cfg, specs, done, pool)
                self.on_event("level", {"depth": depth, "nodes": len(level)})
                spent = self._no_device_stop(cfg, done)
                if spent:
                    break
                if depth < cfg.depth:
                    specs = self._next_level(cfg, level, depth + 1, done)
                    if not specs:
                        break
        except KeyboardInterrupt:
            pool.abort()  # the nodes in flight run again on resume: do not wait for them
            pool = None
            kept = len(store.nodes(run_id))
            raise run.interrupt(f"its {kept} finished nodes are kept and will not run again") from None
        finally:
            if pool is not None:
                pool.close()
        nodes = [NodeRecord.from_row(r) for r in store.nodes(run_id)]
        best = best_node(nodes)
        spent = spent or self._spent()
        reason = (spent + f"; {cfg.algorithm} search stopped at {len(nodes)} nodes" if spent and spent.startswith("no ") else
                  budget_stop_reason(self.budget, run.resume_command(), then=f"{cfg.algorithm} search stopped at {len(nodes)} nodes",
                                     fallback=spent) if spent else
                  f"{cfg.algorithm} search finished: {len(nodes)} nodes") + (
            f"; best: node {best.key} ({best.plan or best.plans[:1]}, "
            f"{f'speedup {best.speedup:.2f}x' if best.speedup is not None else 'speedup not measured'})" if best else "; no correct candidate")
        run.finish("correct" if best else "no_correct_candidate", reason)
        return SearchResult(run_id, cfg, nodes, reason)

    def _first_level(self, cfg: SearchConfig) -> list[_Spec]:
        return get_algorithm(cfg.algorithm).first(cfg)

    def _next_level(self, cfg: SearchConfig, level: list[NodeRecord], depth: int, done: dict[str, NodeRecord]) -> list[_Spec]:
        return get_algorithm(cfg.algorithm).next(cfg, level, done, depth)

    def _run_level(self, store: Any, run_id: str, task: Any, suite: Any, cfg: SearchConfig, specs: list[_Spec],
                   done: dict[str, NodeRecord], pool: Pool) -> list[NodeRecord]:
        from mk.contracts import Context

        jobs = []
        groups: dict[str | None, list[_Spec]] = {}
        for s in specs:
            groups.setdefault(s.parent_key, []).append(s)
        known = {h: n.key for n in done.values() for h in n.hashes}
        lessons = tuple(store.lessons(target=cfg.target))  # read once per level: a worker holds no store
        for parent_key, group in groups.items():
            lineage = self._lineage(parent_key, done)
            lineage_plans = [p for n in lineage for p in n.plans]
            chosen = [done[s.key].plan for s in group if s.key in done]
            planner = None
            for s in group:
                if s.key in done:
                    continue
                if self._spent():
                    break
                planner = planner or make_author(self.author)
                pending = f"pending:{s.key}"  # the plan call belongs to the node it makes: its id is known once written
                origin = f"node {parent_key}" if parent_key else "the reference"
                # the siblings' strategies (a plan's text) beside their names: a name alone tells the planner little;
                # plans other branches took are named too (a plan taken twice is implemented as a fresh sample)
                taken = [done[x.key].plan for x in group if x.key in done] + [
                    f"{j.first_plan.name}: {j.first_plan.text}" if j.first_plan.text else j.first_plan.name
                    for x, j in jobs if x.parent_key == parent_key]
                mine = {n.key for n in lineage} | {x.key for x in group}
                elsewhere = [n.plan for n in done.values() if n.key not in mine and n.plan] + [
                    j.first_plan.name for x, j in jobs if x.parent_key != parent_key]
                hint = (f"Search branch {s.branch + 1} of {s.siblings} from {origin}."
                        + (f" Sibling branches already chose: {'; '.join(taken)}." if taken else "")
                        + (f" Other branches of this search took: {', '.join(dict.fromkeys(elsewhere))}." if elsewhere else "")
                        + " Choose a strategy different from the siblings' and the ancestors'.")
                lineage_text = _lineage_text(lineage)
                if s.note:  # what the algorithm asks of this node (evolve: a mutation or a crossover of the parents' kernels)
                    hint += f" This node is a {s.note}."
                    for key, who in ((parent_key, "parent"), (s.mate_key, "second parent")):
                        if key and key in done and done[key].code:
                            lineage_text += f"\nThe {who}'s kernel (node {key}):\n```python\n{done[key].code[:8000]}\n```"
                ctx = Context(task, cfg.target, [], "\n".join(p for p in (lineage_text and "What the ancestors tried:\n" + lineage_text, hint) if p))
                avoid = set(chosen) | set(lineage_plans)
                if s.note:  # a population search: a child is a new variant, so no plan any node already took
                    avoid |= {p for n in done.values() for p in n.plans} | {j.first_plan.name for _, j in jobs}
                from mk.scopes import node_scope

                with node_scope(pending):
                    plan = choose_plan(planner, ctx, avoid)
                if plan is None:
                    log.info("search node %s: the author has no further plan; branch not created", s.key)
                    continue
                chosen.append(plan.name)
                jobs.append((s, NodeJob(
                    key=s.key, suite=suite, target=cfg.target, author=self._worker_author(), first_plan=plan, lineage=lineage_text,
                    hint=hint, avoid=tuple(avoid | {plan.name}), known=known, iterations=cfg.iterations, tune=cfg.tune,
                    max_trials=cfg.max_trials, max_fixes=cfg.max_fixes, evaluate=self.evaluate,
                    task_locator=dict(task.locator or {}), scales=tuple(task.scales.values()),
                    task=task if isinstance(pool, InlinePool) else None, deadline=self._deadline(), lessons=lessons)))
        by_key = {s.key: s for s, _ in jobs}
        for result in pool.run([j for _, j in jobs]):
            rec = self._write(store, run_id, suite, by_key[result.key], result, done)
            done[rec.key] = rec
            self.on_event("node", {"key": rec.key, "node_id": rec.node_id, "status": rec.status, "speedup": rec.speedup,
                                   "depth": rec.depth, "plan": rec.plan})
        return [done[s.key] for s in specs if s.key in done]

    def _store_worker_calls(self, store: Any, run_id: str, node_id: str, calls: list[dict[str, Any]]) -> None:
        """Record the LM calls a worker made (it has no store), under this run and node, and charge the budget."""
        for c in calls:
            if c.get("run_id") == run_id and c.get("node_id") == node_id:
                continue  # already recorded (an inline worker shares the orchestrator's accountant)
            store.record_lm_call(**{**c, "run_id": run_id, "node_id": node_id})
            if self.budget is not None and not c.get("cache_hit"):
                self.budget.charge(calls=1, cost_usd=c.get("cost_usd"))

    def _no_device_stop(self, cfg: SearchConfig, done: dict[str, NodeRecord]) -> str | None:
        """An LM author without a device of the target stops the search once a correct kernel exists (nothing can be
        timed, so more model calls could not change which kernel is kept) unless it was told to explore."""
        author = self.author
        if isinstance(author, (str, type)) or not hasattr(author, "device_notice") or getattr(author, "explore_without_device", True):
            return None
        if author.device_notice(cfg.target) is None or not any(n.status == "correct" for n in done.values()):
            return None
        return f"no {cfg.target} device here: stopped after the first level with a correct kernel (--explore keeps exploring)"

    def _spent(self) -> str | None:
        return self.budget.exceeded() if self.budget is not None else None

    def _deadline(self) -> float | None:
        if self.budget is None or self.budget.budget.max_wall_s is None:
            return None
        import time

        return time.time() + max(0.0, self.budget.budget.max_wall_s - self.budget.usage().wall_s)

    def _worker_author(self) -> Any:
        spec = author_spec(self.author)
        return spec if spec is not None else self.author

    def _lineage(self, key: str | None, done: dict[str, NodeRecord]) -> list[NodeRecord]:
        chain = []
        while key is not None and key in done:
            chain.append(done[key])
            key = done[key].parent_key
        return chain[::-1]

    def _write(self, store: Any, run_id: str, suite: Any, spec: _Spec, result: NodeResult, done: dict[str, NodeRecord]) -> NodeRecord:
        head = result.head
        dups = [s for s in result.snapshots if s.reason.startswith(DUPLICATE)]
        hashes = sorted({s.code_hash for s in result.snapshots if s.code_hash and s not in dups})
        dup_of = next((n.key for n in done.values() if head is not None and head.code_hash in n.hashes), None)
        if result.error:
            status, reason = "crashed", result.error.splitlines()[0]
        elif not result.snapshots and is_budget_stop(result.stop_reason):
            status, reason = "stopped", "the search's budget ran out before this node tried a candidate"
        elif not result.snapshots:
            status, reason = "crashed", f"the node's session produced no snapshot ({result.stop_reason})"
        elif len(dups) == len(result.snapshots):
            status, reason = "duplicate", head.reason
        else:
            status, reason = head.status, head.reason
        speedup = head.speedup if head is not None and status == "correct" else None
        parent_id = done[spec.parent_key].node_id if spec.parent_key else None
        meta = {"key": spec.key, "parent_key": spec.parent_key, "mate_key": spec.mate_key, "branch": spec.branch, "first_plan": result.plans[0] if result.plans else "",
                "plans": result.plans, "summaries": [s.summary for s in result.snapshots], "hashes": hashes,
                "stop_reason": result.stop_reason, "head": head.name if head else "", "config": head.config if head else {}, "duplicate_of": dup_of,
                "error": result.error}
        with store.transaction():
            node_id = store.add_node(run_id, parent_id, code=head.source if head else "", plan=head.rationale if head else "",
                                     code_hash=head.code_hash if head else None, status=status, reason=reason, speedup=speedup,
                                     depth=spec.depth, meta=meta)
            # LM calls: the orchestrator's plan call for this node, and every call the worker's author made
            store.execute("UPDATE lm_calls SET node_id = ? WHERE run_id = ? AND node_id = ?", [node_id, run_id, f"pending:{spec.key}"])
            self._store_worker_calls(store, run_id, node_id, result.lm_calls)
            for row in result.lessons:  # what the node learnt in its worker, kept with its run and node
                store.add_lesson(**row, run_id=run_id, node_id=node_id)
            for s in result.snapshots:
                store.add_snapshot(run_id, node_id, s.iteration, code=s.source, plan=s.rationale, status=s.status, speedup=s.speedup,
                                   timings=s.timings, profile=s.profile)
                if s.result_json is not None:
                    store.record_evaluation(run_id=run_id, node_id=node_id, task_name=s.task_name, status=s.status, reason=s.reason,
                                            suite_hash=suite.hash, speedup=s.speedup, result_json=s.result_json)
        store.write_progress(run_id)
        log.info("search node %s (%s): %s%s", spec.key, node_id, status, f", speedup {speedup:.2f}x" if speedup else "")
        return NodeRecord(spec.key, node_id, spec.parent_key, spec.depth, status, reason, speedup, head.source if head else "",
                          meta["first_plan"], result.plans, meta["summaries"], hashes, dict(meta["config"] or {}))

    # --- store -------------------------------------------------------------------------
    def _store(self) -> Any:
        import contextlib

        from mk.store import Store

        if self.store is not None:
            return contextlib.nullcontext(self.store)
        return Store.open()


def _lineage_text(lineage: list[NodeRecord], *, keep: int = 3, per_node: int = 4) -> str:
    lines = []
    for n in lineage[-keep:]:
        lines.append(f"node {n.key} (depth {n.depth}): {n.status}" + (f", speedup {n.speedup:.2f}x" if n.speedup else ""))
        lines.extend(f"  {s}" for s in n.summaries[-per_node:])
    return "\n".join(lines)
