"""The DuckDB store: everything a run produced, queryable with SQL afterwards.

One file holds tasks, runs, search-graph nodes and edges, evaluations, frozen
suites, snapshots, tuning trials, LM calls and Optuna journals (the schema is
in :mod:`mk.migrations`, applied in order on open).

Where the file lives, first match wins:

1. the ``path`` given to :meth:`Store.open` (the CLI's ``--db``);
2. ``$MK_DB``;
3. ``$MK_HOME/mk.duckdb``;
4. ``~/.mk/mk.duckdb``.

Parent directories are created. ``":memory:"`` opens a private in-memory store.

Concurrency: **one writing process per file.** DuckDB takes an exclusive
file lock when a process opens the database for writing; a second process
(even a read-only one) cannot open it until the first closes it, and gets a
:class:`~mk.errors.StoreError` naming the file and what to do (wait for the
other mk process, or give this one its own file with ``--db``/``MK_DB``). In mk
the orchestrator is the writer: search workers return typed values and never
open the store. Within the writing process a :class:`Store` is safe to share
between threads (calls are serialised by a lock).

Durability: every write method runs in one transaction (:meth:`Store.transaction`
groups several). DuckDB's write-ahead log makes a committed transaction survive
the process being killed; an uncommitted one vanishes, so a crash loses at most
the write in flight.

Ids are uuid4 hex strings. JSON columns take dicts (or JSON text) and come
back from :meth:`Store.query` as Python values.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import duckdb

from mk.errors import StoreError, StoreLocked
from mk.migrations import migrate, pending
from mk.home import home

log = logging.getLogger(__name__)

MEMORY = ":memory:"
_NODE_FIELDS = {"code", "plan", "code_hash", "status", "reason", "speedup", "depth", "meta"}
_JSON_NODE_FIELDS = {"meta"}


def default_path() -> Path:
    """The store path when none is given: ``$MK_DB``, ``$MK_HOME/mk.duckdb`` or ``~/.mk/mk.duckdb``."""
    if os.environ.get("MK_DB"):
        return Path(os.environ["MK_DB"]).expanduser()
    return home() / "mk.duckdb"


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path | str:
    if path is None:
        return default_path()
    if str(path) == MEMORY:
        return MEMORY
    return Path(path).expanduser()


def new_id() -> str:
    return uuid.uuid4().hex


def to_json(value: Any) -> str | None:
    """JSON text for a JSON column: dicts/lists are dumped, strings must already be JSON."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"expected JSON text, got {text[:80]!r}", hint="pass a dict or valid JSON") from exc
        return text
    return json.dumps(_finite(value), default=_json_default, sort_keys=True)


def _finite(v: Any) -> Any:
    # DuckDB's JSON type rejects NaN/Infinity, which json.dumps would emit.
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, Mapping):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _json_default(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return _finite(v.item())
    if hasattr(v, "tolist") and callable(v.tolist):  # numpy arrays
        return _finite(v.tolist())
    if hasattr(v, "model_dump"):  # pydantic
        return v.model_dump(mode="json")
    return str(v)


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Store:
    """A connection to the mk DuckDB file. Open with :meth:`Store.open`."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, path: Path | str, read_only: bool):
        self._conn = conn
        self.path = path
        self.read_only = read_only
        self._lock = threading.RLock()
        self._depth = 0

    # --- lifecycle ------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> "Store":
        """Open (creating and migrating when writable) the store at ``path``."""
        where = resolve_path(path)
        if isinstance(where, Path):
            if read_only and not where.exists():
                raise StoreError(f"no mk store at {where}", hint="run mk once without read-only access to create it, or pass --db")
            try:
                where.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for the store {where}: {exc}", hint="pass --db or set MK_DB to a writable path") from exc
        try:
            conn = duckdb.connect(str(where), read_only=read_only)
        except duckdb.Error as exc:
            raise _open_error(where, exc) from exc
        store = cls(conn, where, read_only)
        try:
            if read_only:
                todo = pending(conn)
                if todo:
                    raise StoreError(
                        f"the store {where} needs schema migrations {todo}",
                        hint="open it once for writing (any mk command that writes) to migrate",
                    )
            else:
                ran = migrate(conn)
                if ran:
                    log.info("store %s: applied migrations %s", where, ", ".join(ran))
        except duckdb.Error as exc:
            conn.close()
            raise StoreError(f"cannot migrate the store {where}: {exc}", hint="use --db to start a fresh file") from exc
        except StoreError:
            conn.close()
            raise
        return store

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}{', read_only=True' if self.read_only else ''})"

    # --- raw SQL --------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator["Store"]:
        """Group writes: all commit together or none do. Nested uses join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            self._check_writable()
            self._conn.begin()
            self._depth = 1
            try:
                yield self
            except BaseException:
                self._depth = 0
                self._conn.rollback()
                raise
            self._depth = 0
            try:
                self._conn.commit()
            except duckdb.Error as exc:
                raise StoreError(f"could not commit to {self.path}: {exc}") from exc

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        """Run one write statement in a transaction."""
        with self.transaction():
            self._run(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one write statement per parameter row, all in one transaction."""
        with self.transaction():
            for row in rows:
                self._run(sql, row)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts; JSON columns are decoded."""
        with self._lock:
            cur = self._run(sql, params)
            if cur.description is None:
                return []
            cols = [d[0] for d in cur.description]
            is_json = [str(d[1]) == "JSON" for d in cur.description]
            rows = cur.fetchall()
        return [
            {c: (json.loads(v) if j and isinstance(v, str) else v) for c, j, v in zip(cols, is_json, row)}
            for row in rows
        ]

    def _run(self, sql: str, params: Any) -> duckdb.DuckDBPyConnection:
        try:
            return self._conn.execute(sql, params if params is not None else [])
        except duckdb.Error as exc:
            raise StoreError(f"store query failed on {self.path}: {exc}", sql=sql[:200]) from exc

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError(f"the store {self.path} is open read-only", hint="open it without read_only to write")

    def _one(self, sql: str, params: Sequence[Any]) -> dict[str, Any] | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    # --- tasks and runs -------------------------------------------------------
    def upsert_task(self, fingerprint: str, name: str, kind: str, source: str | None, spec: Mapping[str, Any] | str) -> str:
        now = _now()
        self.execute(
            """INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (fingerprint) DO UPDATE SET name = excluded.name, kind = excluded.kind,
               source = excluded.source, spec = excluded.spec, updated_at = excluded.updated_at""",
            [fingerprint, name, kind, None if source is None else str(source), to_json(spec), now, now],
        )
        return fingerprint

    def get_task(self, fingerprint: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM tasks WHERE fingerprint = ?", [fingerprint])

    def create_run(self, task_fingerprint: str | None, mode: str, config: Mapping[str, Any] | None = None) -> str:
        run_id = new_id()
        self.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, 'running', NULL, ?, NULL)",
            [run_id, task_fingerprint, mode, to_json(config or {}), _now()],
        )
        self.write_progress(run_id)
        return run_id

    def finish_run(self, run_id: str, status: str, reason: str | None = None) -> None:
        with self.transaction():
            self._require("runs", run_id)
            self._run("UPDATE runs SET status = ?, reason = ?, finished_at = ? WHERE id = ?", [status, reason, _now(), run_id])
        self.write_progress(run_id)

    # --- progress files: what `mk runs` / `mk show` read while this process holds the file --------------
    @property
    def progress_dir(self) -> Path | None:
        """``<store>.runs/``: one small JSON file per run, rewritten as the run goes (None for an in-memory store)."""
        return progress_folder(self.path)

    @property
    def bench_progress_dir(self) -> Path | None:
        """``<store>.benches/``: one small JSON file per benchmark (:mod:`mk.bench.record`), like a run's."""
        return progress_folder(self.path, "benches")

    def write_progress(self, run_id: str | None) -> None:
        """Rewrite ``run_id``'s progress file (status, reason, counts, best speedup, the writer's pid and host);
        best effort, never raises."""
        if self.progress_dir is None or not run_id or self.read_only:
            return
        try:
            row = self._one(
                """SELECT r.id, r.mode, r.status, r.reason, r.started_at, r.finished_at, t.name AS task,
                          json_extract_string(r.config, '$.settings.bench') AS bench,
                          (SELECT count(*) FROM nodes n WHERE n.run_id = r.id) AS nodes,
                          (SELECT count(*) FROM snapshots s WHERE s.run_id = r.id) AS snapshots,
                          (SELECT max(speedup) FROM nodes n WHERE n.run_id = r.id AND n.status = 'correct') AS best_speedup,
                          (SELECT count(*) FROM nodes n WHERE n.run_id = r.id AND n.status = 'correct') AS correct_nodes
                   FROM runs r LEFT JOIN tasks t ON t.fingerprint = r.task_fingerprint WHERE r.id = ?""", [run_id])
            if row is not None:
                self.write_progress_file(self.progress_dir, run_id, row)
        except Exception as exc:  # noqa: BLE001 - a progress file is a convenience; the store is the record
            log.debug("progress file for run %s not written: %s", run_id, exc)

    def write_progress_file(self, folder: Path | None, ident: str, row: Mapping[str, Any]) -> None:
        """Atomically replace ``folder/<ident>.json`` with ``row`` plus ``updated_at`` and this process's
        :func:`writer_fields`; best effort, never raises (nothing for an in-memory or read-only store)."""
        if folder is None or self.read_only:
            return
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{ident}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({**row, "updated_at": _now(), **writer_fields()}, default=str))
            tmp.replace(folder / f"{ident}.json")
        except Exception as exc:  # noqa: BLE001
            log.debug("progress file %s/%s.json not written: %s", folder, ident, exc)

    def interrupt_run(self, run_id: str, kept: str, resume: str | None = None) -> KeyboardInterrupt:
        """Mark ``run_id`` interrupted (Ctrl-C, SIGTERM) and return the exception to raise: its message names the
        run, what was kept and the command that continues it (``resume``; default ``mk resume RUN``)."""
        message = f"run {run_id} interrupted; {kept}; continue it with: {resume or f'mk resume {run_id}'}"
        try:
            self.finish_run(run_id, "interrupted", message)
        except Exception as exc:  # noqa: BLE001 - the store may itself be what failed; the message still goes out
            log.warning("could not mark run %s interrupted: %s", run_id, exc)
        return KeyboardInterrupt(message)

    def update_run_config(self, run_id: str, changes: Mapping[str, Any]) -> None:
        """Merge ``changes`` into the run's stored config (e.g. the suite hash, known once the suite is frozen)."""
        with self.transaction():
            self._require("runs", run_id)
            row = self._one("SELECT config FROM runs WHERE id = ?", [run_id]) or {}
            config = row.get("config") or {}
            config = json.loads(config) if isinstance(config, str) else dict(config)
            self._run("UPDATE runs SET config = ? WHERE id = ?", [to_json({**config, **dict(changes)}), run_id])

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run's row, or None when there is no such run."""
        return self._one("SELECT * FROM runs WHERE id = ?", [run_id])

    def find_run(self, ident: str) -> dict[str, Any]:
        """The run whose id is ``ident`` or, failing that, the one run whose id starts with it (as `mk runs` prints ids)."""
        run = self.get_run(ident)
        if run is None and ident:
            rows = self.query("SELECT id FROM runs WHERE id LIKE ?", [ident + "%"])
            run = self.get_run(rows[0]["id"]) if len(rows) == 1 else None
            if len(rows) > 1:
                raise StoreError(f"{len(rows)} runs have ids starting with {ident!r} in {self.path}",
                                 hint="`mk runs` lists the runs; give more of the id")
        if run is None:
            bench = self.query("SELECT id FROM bench_runs WHERE id LIKE ?", [ident + "%"]) if ident else []
            if len(bench) == 1:  # a benchmark's id: it has its own resume
                raise StoreError(f"{ident!r} is a benchmark, not a run", hint=f"continue it with: mk bench --resume {bench[0]['id']}")
            raise StoreError(f"no run matches {ident!r} in {self.path} (as its id or a unique prefix of one)",
                             hint="`mk runs` lists the runs; give the id or a unique prefix of it")
        return run

    def list_runs(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs, newest first."""
        sql = "SELECT * FROM runs ORDER BY started_at DESC"
        return self.query(sql + (f" LIMIT {int(limit)}" if limit else ""))

    # --- search graph ---------------------------------------------------------
    def add_node(
        self,
        run_id: str,
        parent_id: str | None = None,
        *,
        code: str | None = None,
        plan: str | None = None,
        code_hash: str | None = None,
        status: str = "pending",
        reason: str | None = None,
        speedup: float | None = None,
        depth: int = 0,
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert a node and, when it has a parent, the parent->child edge (one transaction)."""
        node_id = new_id()
        now = _now()
        with self.transaction():
            self._run(
                "INSERT INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [node_id, run_id, parent_id, code, plan, code_hash, status, reason, speedup, depth, to_json(meta or {}), now, now],
            )
            if parent_id is not None:
                self._run("INSERT INTO edges VALUES (?, ?, ?, ?)", [run_id, parent_id, node_id, now])
        if self._depth == 0:  # inside a caller's transaction the row is not committed yet: the caller's next write says it
            self.write_progress(run_id)
        return node_id

    def update_node(self, node_id: str, **fields: Any) -> None:
        unknown = set(fields) - _NODE_FIELDS
        if unknown:
            raise StoreError(f"cannot update node fields {sorted(unknown)}", hint=f"updatable: {', '.join(sorted(_NODE_FIELDS))}")
        if not fields:
            return
        cols = list(fields)
        values = [to_json(fields[c]) if c in _JSON_NODE_FIELDS else fields[c] for c in cols]
        sets = ", ".join(f"{c} = ?" for c in cols)
        with self.transaction():
            self._require("nodes", node_id)
            self._run(f"UPDATE nodes SET {sets}, updated_at = ? WHERE id = ?", [*values, _now(), node_id])

    def get_node(self, node_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM nodes WHERE id = ?", [node_id])

    def nodes(self, run_id: str) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM nodes WHERE run_id = ? ORDER BY created_at, id", [run_id])

    def edges(self, run_id: str) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM edges WHERE run_id = ? ORDER BY created_at, child_id", [run_id])

    # --- evaluations, suites, snapshots ---------------------------------------
    def record_evaluation(
        self,
        *,
        run_id: str | None = None,
        node_id: str | None = None,
        task_name: str,
        status: str,
        reason: str | None = None,
        suite_hash: str | None = None,
        speedup: float | None = None,
        result_json: str | Mapping[str, Any] | None = None,
    ) -> str:
        eval_id = new_id()
        self.execute(
            "INSERT INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [eval_id, run_id, node_id, task_name, status, reason, suite_hash, speedup, to_json(result_json), _now()],
        )
        return eval_id

    def record_suite(self, suite_hash: str, task_fingerprint: str | None, cases_json: str | Sequence[Any] | Mapping[str, Any]) -> str:
        """Store a frozen suite once; recording the same hash again is a no-op."""
        self.execute(
            "INSERT OR IGNORE INTO suites VALUES (?, ?, ?, ?)",
            [suite_hash, task_fingerprint, to_json(cases_json), _now()],
        )
        return suite_hash

    def get_suite(self, suite_hash: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM suites WHERE suite_hash = ?", [suite_hash])

    def add_snapshot(
        self,
        run_id: str,
        node_id: str | None,
        iteration: int,
        *,
        code: str | None = None,
        plan: str | None = None,
        status: str | None = None,
        speedup: float | None = None,
        timings: Mapping[str, Any] | None = None,
        profile: Mapping[str, Any] | None = None,
    ) -> str:
        snap_id = new_id()
        self.execute(
            "INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [snap_id, run_id, node_id, iteration, code, plan, status, speedup, to_json(timings or {}), to_json(profile or {}), _now()],
        )
        if self._depth == 0:
            self.write_progress(run_id)
        return snap_id

    def snapshots(self, run_id: str, node_id: str | None = None) -> list[dict[str, Any]]:
        if node_id is None:
            return self.query("SELECT * FROM snapshots WHERE run_id = ? ORDER BY iteration, created_at", [run_id])
        return self.query("SELECT * FROM snapshots WHERE run_id = ? AND node_id = ? ORDER BY iteration, created_at", [run_id, node_id])

    # --- tuning and LM accounting ---------------------------------------------
    def record_trial(
        self,
        run_id: str | None,
        node_id: str | None,
        study: str,
        number: int,
        params: Mapping[str, Any],
        state: str,
        value: float | None = None,
        reason: str | None = None,
        basis: str | None = None,
    ) -> str:
        """Record (or replace) trial ``number`` of ``study`` for this run. ``basis`` says what ``value`` is:
        ``measured`` seconds, or ``estimated <chip> at <scale>`` (the compiler's estimate, never a measurement)."""
        trial_id = new_id()
        with self.transaction():
            self._run(
                "DELETE FROM trials WHERE run_id IS NOT DISTINCT FROM ? AND study = ? AND number = ?",
                [run_id, study, number],
            )
            self._run(
                "INSERT INTO trials (id, run_id, node_id, study, number, params, state, value, reason, created_at, basis) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [trial_id, run_id, node_id, study, number, to_json(params), state, value, reason, _now(), basis],
            )
        return trial_id

    def trials(self, run_id: str | None = None, study: str | None = None) -> list[dict[str, Any]]:
        return self.query(
            """SELECT * FROM trials WHERE (? IS NULL OR run_id = ?) AND (? IS NULL OR study = ?)
               ORDER BY study, number""",
            [run_id, run_id, study, study],
        )

    def record_lm_call(  # cost_usd None = unknown (not priced); lm_spend sums the known ones
        self,
        *,
        run_id: str | None = None,
        node_id: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        latency_s: float = 0.0,
        cost_usd: float | None = None,
        cache_hit: bool = False,
        error: str | None = None,
    ) -> str:
        call_id = new_id()
        self.execute(
            "INSERT INTO lm_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [call_id, run_id, node_id, agent, model, int(input_tokens or 0), int(output_tokens or 0),
             float(latency_s or 0.0), None if cost_usd is None else float(cost_usd), bool(cache_hit), error, _now()],
        )
        return call_id

    # --- lessons (mk.lessons) ----------------------------------------------------
    def add_lesson(self, *, kind: str, target: str, task: str, shape_class: str, problem: str, lesson: str,
                   status: str | None = None, speedup: float | None = None, run_id: str | None = None,
                   node_id: str | None = None) -> str:
        lesson_id = new_id()
        self.execute("INSERT INTO lessons VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, false)",
                     [lesson_id, kind, target, task, shape_class, problem, lesson, status, _finite(speedup), run_id, node_id,
                      _now()])
        return lesson_id

    def lessons(self, *, kind: str | None = None, target: str | None = None, dropped: bool = False) -> list[dict[str, Any]]:
        """Lessons, newest first (``dropped`` ones only when asked)."""
        return self.query(
            """SELECT * FROM lessons WHERE (? IS NULL OR kind = ?) AND (? IS NULL OR target = ?) AND (dropped = false OR ?)
               ORDER BY created_at DESC""", [kind, kind, target, target, dropped])

    def drop_lesson(self, ident: str) -> dict[str, Any]:
        """Mark the lesson ``ident`` (an id or a unique prefix) dropped: it is never retrieved again."""
        rows = self.query("SELECT * FROM lessons WHERE id LIKE ?", [ident + "%"]) if ident else []
        if len(rows) != 1:
            raise StoreError(f"no lesson matches {ident!r}" if not rows else f"{len(rows)} lessons match {ident!r}",
                             hint="`mk kb lessons` lists them with their ids")
        self.execute("UPDATE lessons SET dropped = true WHERE id = ?", [rows[0]["id"]])
        return rows[0]

    def lm_spend(self, run_id: str | None) -> dict[str, Any]:
        """Totals for one run's LM calls (all runs when ``run_id`` is None)."""
        row = self._one(
            """SELECT count(*) AS calls,
                      coalesce(sum(input_tokens), 0) AS input_tokens,
                      coalesce(sum(output_tokens), 0) AS output_tokens,
                      coalesce(sum(cost_usd), 0.0) AS cost_usd,
                      coalesce(sum(latency_s), 0.0) AS latency_s,
                      count(*) FILTER (WHERE cache_hit) AS cache_hits,
                      count(*) FILTER (WHERE error IS NOT NULL) AS errors
               FROM lm_calls WHERE (? IS NULL OR run_id = ?)""",
            [run_id, run_id],
        )
        return {k: (int(v) if k in ("calls", "input_tokens", "output_tokens", "cache_hits", "errors") else float(v)) for k, v in (row or {}).items()}

    # --- helpers --------------------------------------------------------------
    def _require(self, table: str, row_id: str) -> None:
        if not self._conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", [row_id]).fetchone():
            raise StoreError(f"no {table[:-1]} {row_id!r} in {self.path}", hint="check the id (mk lists runs with their ids)")


# --- progress files and the liveness of their writers ------------------------------------------------------------
def progress_folder(path: Path | str | os.PathLike[str] | None, kind: str = "runs") -> Path | None:
    """``<store>.<kind>/`` beside the store file at ``path`` (resolved as :meth:`Store.open` does); None in memory."""
    where = path if isinstance(path, Path) else resolve_path(path)
    return Path(str(where) + "." + kind) if isinstance(where, Path) else None


def read_progress(folder: Path | None, ident: str | None = None) -> list[dict[str, Any]]:
    """The progress files in ``folder`` (only ``<ident>.json`` when given), decoded; unreadable ones are skipped (a
    file being replaced right now: the next read has it)."""
    if folder is None or not folder.is_dir():
        return []
    files = [folder / f"{ident}.json"] if ident else sorted(folder.glob("*.json"))
    rows = []
    for f in files:
        try:
            rows.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return rows


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of process ``pid`` from ``/proc``; None where there is no /proc."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # after "pid (comm)": state is field 3, starttime field 22
    return (fields[0], fields[19]) if len(fields) > 19 else None


def writer_fields() -> dict[str, Any]:
    """Who writes a progress file: pid, host name and (on Linux) the process's start time, so that a pid reused by
    another process later is not taken for the writer, and a pid from another machine is never tested here."""
    stat = _proc_stat(os.getpid())
    return {"writer_pid": os.getpid(), "writer_host": socket.gethostname(), "writer_start": stat[1] if stat else None}


def writer_state(progress: Mapping[str, Any] | None) -> str:
    """``alive``, ``gone`` or ``unknown``: is the process a progress file names still running? Only a writer on this
    host is tested (``unknown`` for another host's pid, or a file from before the host was recorded)."""
    if not progress or not progress.get("writer_pid") or progress.get("writer_host") != socket.gethostname():
        return "unknown"
    pid = int(progress["writer_pid"])
    if pid == os.getpid():
        return "alive"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:  # exists, another user's
        pass
    except OSError:
        return "unknown"
    stat = _proc_stat(pid)
    if stat is not None:
        if stat[0] in ("Z", "X"):  # exited, not yet reaped by its parent
            return "gone"
        if progress.get("writer_start") and str(progress["writer_start"]) != stat[1]:  # the pid now names another process
            return "gone"
    return "alive"


def shown_status(status: str | None, progress: Mapping[str, Any] | None, *, store_readable: bool) -> str | None:
    """The status a read command shows for a run or benchmark stored as ``status`` — the one place liveness is
    decided. A ``running`` one is ``killed`` when the writer its progress file names is gone from this host, or when
    the store could be opened (no process holds DuckDB's write lock) and no live writer on this host is known (a
    HITL session pausing between phases has closed the store but its process is alive: still ``running``). Nothing
    is written: the row stays ``running`` until a resume continues it."""
    if status != "running":
        return status
    state = writer_state(progress)
    if state == "gone" or (state == "unknown" and store_readable):
        return "killed"
    return status


def killed_reason(progress: Mapping[str, Any] | None, resume: str) -> str:
    """Why a read command shows ``killed``, with the command that continues it."""
    if writer_state(progress) == "gone":
        why = f"its process (pid {progress['writer_pid']} on {progress['writer_host']}) is gone"  # type: ignore[index]
    else:
        why = "no process holds the store, and it was never marked finished"
    return f"killed: {why} (SIGKILL, a crash or a reboot); continue it with: {resume}"


def _open_error(where: Path | str, exc: duckdb.Error) -> StoreError:
    text = str(exc)
    if "lock" in text.lower():
        return StoreLocked(
            f"the store {where} is locked by another process ({text})",
            hint="DuckDB allows one writing process per file: wait for the other mk process to finish, "
            "or give this one its own file with --db PATH or MK_DB",
            path=str(where),
        )
    if "different configuration" in text:
        return StoreError(
            f"the store {where} is already open in this process with another mode (read-only vs writable)",
            hint="reuse the open Store, or close it first",
            path=str(where),
        )
    return StoreError(f"cannot open the store {where}: {text}", hint="pass --db to use another file", path=str(where))
