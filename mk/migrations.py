"""Ordered schema migrations for the DuckDB store.

Each migration is a small function registered with :func:`migration`; the
registry order is the order they run in. Applied migrations are recorded by
name in the ``_migrations`` table, so :func:`migrate` is idempotent and a
database created by an older mk is brought forward step by step. Never edit a
migration that has shipped: add a new one.

JSON columns use DuckDB's ``JSON`` type; ids are uuid4 hex strings; times are
naive UTC ``TIMESTAMP`` values written by the store.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Callable

import duckdb

log = logging.getLogger(__name__)

Migration = Callable[[duckdb.DuckDBPyConnection], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration (its name is its identity)."""
    if any(name == fn.__name__ for name, _ in MIGRATIONS):
        raise ValueError(f"migration {fn.__name__!r} is registered twice")
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def _ensure_table(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")


def applied(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """Names of the migrations already applied, in order of application."""
    exists = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = '_migrations'"
    ).fetchone()[0]
    if not exists:
        return []
    return [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY applied_at, name").fetchall()]


def pending(conn: duckdb.DuckDBPyConnection) -> list[str]:
    done = set(applied(conn))
    return [name for name, _ in MIGRATIONS if name not in done]


def migrate(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply every pending migration, each in its own transaction. Returns their names."""
    _ensure_table(conn)
    done = set(applied(conn))
    ran = []
    for name, fn in MIGRATIONS:
        if name in done:
            continue
        conn.begin()
        try:
            fn(conn)
            conn.execute(
                "INSERT INTO _migrations VALUES (?, ?)",
                [name, datetime.now(timezone.utc).replace(tzinfo=None)],
            )
            conn.commit()
        except Exception:
            conn.rollback()
            raise
        log.debug("applied migration %s", name)
        ran.append(name)
    return ran


# --- the migrations, in order ------------------------------------------------


@migration
def m001_tasks(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE tasks (
            fingerprint VARCHAR PRIMARY KEY,
            name VARCHAR NOT NULL,
            kind VARCHAR,
            source VARCHAR,
            spec JSON,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        )"""
    )


@migration
def m002_runs(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE runs (
            id VARCHAR PRIMARY KEY,
            task_fingerprint VARCHAR,
            mode VARCHAR NOT NULL,
            config JSON,
            status VARCHAR NOT NULL,
            reason VARCHAR,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        )"""
    )


@migration
def m003_search_graph(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE nodes (
            id VARCHAR PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            parent_id VARCHAR,
            code VARCHAR,
            plan VARCHAR,
            code_hash VARCHAR,
            status VARCHAR,
            reason VARCHAR,
            speedup DOUBLE,
            depth INTEGER,
            meta JSON,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX nodes_run ON nodes(run_id)")
    conn.execute(
        """CREATE TABLE edges (
            run_id VARCHAR NOT NULL,
            parent_id VARCHAR NOT NULL,
            child_id VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (parent_id, child_id)
        )"""
    )


@migration
def m004_evaluations(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE evaluations (
            id VARCHAR PRIMARY KEY,
            run_id VARCHAR,
            node_id VARCHAR,
            task_name VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            reason VARCHAR,
            suite_hash VARCHAR,
            speedup DOUBLE,
            result JSON,
            created_at TIMESTAMP NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE suites (
            suite_hash VARCHAR PRIMARY KEY,
            task_fingerprint VARCHAR,
            cases JSON,
            created_at TIMESTAMP NOT NULL
        )"""
    )


@migration
def m005_snapshots(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE snapshots (
            id VARCHAR PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            node_id VARCHAR,
            iteration INTEGER NOT NULL,
            code VARCHAR,
            plan VARCHAR,
            status VARCHAR,
            speedup DOUBLE,
            timings JSON,
            profile JSON,
            created_at TIMESTAMP NOT NULL
        )"""
    )


@migration
def m006_trials(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE trials (
            id VARCHAR PRIMARY KEY,
            run_id VARCHAR,
            node_id VARCHAR,
            study VARCHAR NOT NULL,
            number INTEGER NOT NULL,
            params JSON,
            state VARCHAR NOT NULL,
            value DOUBLE,
            reason VARCHAR,
            created_at TIMESTAMP NOT NULL
        )"""
    )


@migration
def m007_lm_calls(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        """CREATE TABLE lm_calls (
            id VARCHAR PRIMARY KEY,
            run_id VARCHAR,
            node_id VARCHAR,
            agent VARCHAR,
            model VARCHAR,
            input_tokens BIGINT,
            output_tokens BIGINT,
            latency_s DOUBLE,
            cost_usd DOUBLE,
            cache_hit BOOLEAN NOT NULL,
            error VARCHAR,
            created_at TIMESTAMP NOT NULL
        )"""
    )


@migration
def m008_optuna_journal(conn: duckdb.DuckDBPyConnection) -> None:
    """Optuna journal logs (see mk.tuning.journal): one row per log entry.

    ``log`` is JSON *text* in a VARCHAR, not DuckDB's JSON type: Optuna logs may
    hold NaN or Infinity (trial values), which the JSON type rejects."""
    conn.execute(
        """CREATE TABLE optuna_journal (
            journal VARCHAR NOT NULL,
            log_number BIGINT NOT NULL,
            log VARCHAR NOT NULL,
            PRIMARY KEY (journal, log_number)
        )"""
    )


@migration
def m009_bench(conn: duckdb.DuckDBPyConnection) -> None:
    """Benchmark runs (``mk bench``): one ``bench_runs`` row per invocation, with each
    method's metrics, and one ``bench_results`` row per (method, task)."""
    conn.execute(
        """CREATE TABLE bench_runs (
            id VARCHAR PRIMARY KEY,
            suite VARCHAR NOT NULL,
            target VARCHAR NOT NULL,
            scale VARCHAR,
            methods JSON,
            author VARCHAR,
            config JSON,
            metrics JSON,
            status VARCHAR NOT NULL,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        )"""
    )
    conn.execute(
        """CREATE TABLE bench_results (
            bench_id VARCHAR NOT NULL,
            method VARCHAR NOT NULL,
            task VARCHAR NOT NULL,
            task_fingerprint VARCHAR,
            run_id VARCHAR,
            status VARCHAR NOT NULL,
            reason VARCHAR,
            compiled BOOLEAN NOT NULL,
            correct BOOLEAN NOT NULL,
            speedup DOUBLE,
            candidates INTEGER NOT NULL,
            progress JSON,
            seconds DOUBLE,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (bench_id, method, task)
        )"""
    )


@migration
def m010_optimize_cache(conn: duckdb.DuckDBPyConnection) -> None:
    """``mk.optimize`` results by (function source, shapes, dtypes, statics, target, device kind, mk version)."""
    conn.execute(
        """CREATE TABLE optimize_cache (
            key VARCHAR PRIMARY KEY,
            task VARCHAR NOT NULL,
            target VARCHAR NOT NULL,
            device VARCHAR NOT NULL,
            run_id VARCHAR,
            kernel_source VARCHAR,
            report JSON NOT NULL,
            created_at TIMESTAMP NOT NULL
        )"""
    )


@migration
def m011_lessons(conn: duckdb.DuckDBPyConnection) -> None:
    """What past runs learned: an error with the fix that resolved it, a plan with how it did (per target and shape
    class); retrieved for the fixer and the planner of later runs (:mod:`mk.lessons`)."""
    conn.execute(
        """CREATE TABLE lessons (
            id VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,
            target VARCHAR NOT NULL,
            task VARCHAR NOT NULL,
            shape_class VARCHAR NOT NULL,
            problem VARCHAR NOT NULL,
            lesson VARCHAR NOT NULL,
            status VARCHAR,
            speedup DOUBLE,
            run_id VARCHAR,
            node_id VARCHAR,
            created_at TIMESTAMP NOT NULL,
            dropped BOOLEAN NOT NULL DEFAULT false
        )"""
    )


@migration
def m012_bench_noise(conn: duckdb.DuckDBPyConnection) -> None:
    """What the bench's noise step measured per (method, task) row (:mod:`mk.bench.noise`): the speedups of the
    repeated side-by-side timing, their spread and the methods tied with it, so a resumed benchmark reports them for
    the rows it kept."""
    conn.execute("ALTER TABLE bench_results ADD COLUMN noise JSON")


@migration
def m013_trial_basis(conn: duckdb.DuckDBPyConnection) -> None:
    """What a trial's ``value`` is: ``measured`` (median seconds on the device) or ``estimated <chip> at <scale>``
    (the compiler's estimate without the device, :mod:`mk.harness.estimate`); NULL when it has none."""
    conn.execute("ALTER TABLE trials ADD COLUMN basis VARCHAR")
