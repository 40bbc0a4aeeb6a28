import os
import signal
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from mk.errors import StoreError
from mk.migrations import MIGRATIONS, applied, migrate, pending
from mk.store import Store, default_path, resolve_path


# --- migrations ---------------------------------------------------------------


def test_migrations_apply_in_order_and_are_idempotent():
    conn = duckdb.connect(":memory:")
    assert pending(conn) == [name for name, _ in MIGRATIONS]
    ran = migrate(conn)
    assert ran == [name for name, _ in MIGRATIONS]
    assert applied(conn) == ran
    assert migrate(conn) == [] and pending(conn) == []
    tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"tasks", "runs", "nodes", "edges", "evaluations", "suites", "snapshots", "trials", "lm_calls", "optuna_journal"} <= tables


def test_a_failing_migration_rolls_back_and_is_not_recorded(monkeypatch):
    def m999_broken(conn):
        conn.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("boom")

    monkeypatch.setattr("mk.migrations.MIGRATIONS", [*MIGRATIONS, ("m999_broken", m999_broken)])
    conn = duckdb.connect(":memory:")
    with pytest.raises(RuntimeError):
        migrate(conn)
    assert "m999_broken" not in applied(conn)
    assert not conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'half_done'").fetchone()[0]


# --- paths --------------------------------------------------------------------


def test_path_resolution_order(monkeypatch, tmp_path):
    monkeypatch.setenv("MK_DB", str(tmp_path / "env.duckdb"))
    assert default_path() == tmp_path / "env.duckdb"
    assert resolve_path(tmp_path / "explicit.duckdb") == tmp_path / "explicit.duckdb"
    monkeypatch.delenv("MK_DB")
    monkeypatch.setenv("MK_HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / "mk.duckdb"
    monkeypatch.delenv("MK_HOME")
    assert default_path().parts[-2:] == (".mk", "mk.duckdb")
    assert resolve_path(":memory:") == ":memory:"


def test_open_creates_parent_dirs_and_uses_env(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b" / "s.duckdb"
    monkeypatch.setenv("MK_DB", str(target))
    with Store.open() as store:
        assert store.path == target
    assert target.exists()


# --- the API ------------------------------------------------------------------


@pytest.fixture
def store():
    s = Store.open(":memory:")
    yield s
    s.close()


def test_runs_nodes_edges(store):
    store.upsert_task("fp", "mm", "callable", "/x.py", {"scales": {"ci": [[2, 2]]}})
    store.upsert_task("fp", "mm2", "callable", None, {"v": 2})
    assert store.get_task("fp")["name"] == "mm2" and store.get_task("fp")["spec"] == {"v": 2}
    run = store.create_run("fp", "search", {"beam": 2})
    root = store.add_node(run, None, code="a", plan="p", code_hash="h", status="ok", speedup=1.0, depth=0, meta={"k": [1, 2]})
    child = store.add_node(run, root, code="b", depth=1)
    store.update_node(child, status="correct", speedup=2.5, meta={"m": 1})
    nodes = {n["id"]: n for n in store.nodes(run)}
    assert nodes[root]["meta"] == {"k": [1, 2]} and nodes[child]["speedup"] == 2.5 and nodes[child]["meta"] == {"m": 1}
    assert [(e["parent_id"], e["child_id"]) for e in store.edges(run)] == [(root, child)]
    assert store.get_run(run)["status"] == "running" and store.get_run(run)["config"] == {"beam": 2}
    store.finish_run(run, "done", "budget spent")
    got = store.get_run(run)
    assert got["status"] == "done" and got["reason"] == "budget spent" and got["finished_at"] is not None
    assert [r["id"] for r in store.list_runs()] == [run]
    assert store.get_run("nope") is None
    with pytest.raises(StoreError, match="cannot update node fields"):
        store.update_node(child, nonsense=1)
    with pytest.raises(StoreError, match="no node"):
        store.update_node("missing", status="x")
    with pytest.raises(StoreError, match="no run"):
        store.finish_run("missing", "done")


def test_find_run_by_id_or_unique_prefix(store):
    ids = [store.create_run(None, "auto", {}) for _ in range(17)]  # hex ids: two of 17 share a first digit
    a = ids[0]
    assert store.find_run(a)["id"] == a
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    shared = [i for i in ids if i.startswith(first)]
    with pytest.raises(StoreError, match=f"{len(shared)} runs have ids starting with '{first}'"):
        store.find_run(first)
    unique = next(i for i in ids if sum(j.startswith(i[:8]) for j in ids) == 1)
    assert store.find_run(unique[:8])["id"] == unique
    with pytest.raises(StoreError, match="no run matches 'zz-nope'"):
        store.find_run("zz-nope")
    with pytest.raises(StoreError, match="no run matches"):
        store.find_run("")


def test_evaluations_suites_snapshots_trials(store):
    run = store.create_run(None, "auto", {})
    node = store.add_node(run, None, code="k")
    e1 = store.record_evaluation(run_id=run, node_id=node, task_name="t", status="correct", suite_hash="s1", speedup=1.7,
                                 result_json={"timings": [1.0, float("nan")]})
    e2 = store.record_evaluation(task_name="t", status="compile_error", reason="bad", suite_hash="s1", result_json='{"a": 1}')
    rows = {r["id"]: r for r in store.query("SELECT * FROM evaluations")}
    assert rows[e1]["result"] == {"timings": [1.0, "nan"]} and rows[e2]["result"] == {"a": 1} and rows[e2]["run_id"] is None
    with pytest.raises(StoreError, match="JSON"):
        store.record_evaluation(task_name="t", status="x", result_json="not json")
    store.record_suite("s1", "fp", [{"seed": 0}])
    store.record_suite("s1", "fp", [{"seed": 99}])  # frozen: the first one stays
    assert store.get_suite("s1")["cases"] == [{"seed": 0}]
    store.add_snapshot(run, node, 1, code="k", plan="p", status="correct", speedup=1.2, timings={"median": 1e-3}, profile={})
    store.add_snapshot(run, node, 0, code="k0")
    assert [s["iteration"] for s in store.snapshots(run)] == [0, 1]
    assert store.snapshots(run, node)[1]["timings"] == {"median": 1e-3}
    store.record_trial(run, node, "tiles", 0, {"bm": 128}, "RUNNING")
    store.record_trial(run, node, "tiles", 0, {"bm": 128}, "COMPLETE", 0.5)
    store.record_trial(run, node, "tiles", 1, {"bm": 256}, "FAIL", None, "vmem overflow")
    trials = store.trials(run, "tiles")
    assert [(t["number"], t["state"], t["value"], t["reason"]) for t in trials] == [(0, "COMPLETE", 0.5, None), (1, "FAIL", None, "vmem overflow")]


def test_lm_accounting(store):
    run = store.create_run(None, "auto", {})
    other = store.create_run(None, "auto", {})
    store.record_lm_call(run_id=run, agent="planner", model="m", input_tokens=100, output_tokens=20, latency_s=1.5, cost_usd=0.01, cache_hit=False)
    store.record_lm_call(run_id=run, agent="implementer", model="m", input_tokens=50, output_tokens=10, latency_s=0.0, cost_usd=None, cache_hit=True)
    store.record_lm_call(run_id=other, agent="planner", model="m", input_tokens=7, output_tokens=1, latency_s=0.1, cost_usd=0.2, cache_hit=False, error="timeout")
    spend = store.lm_spend(run)
    assert spend == {"calls": 2, "input_tokens": 150, "output_tokens": 30, "cost_usd": pytest.approx(0.01), "latency_s": 1.5, "cache_hits": 1, "errors": 0}
    assert store.lm_spend(None)["calls"] == 3 and store.lm_spend(None)["errors"] == 1
    assert store.lm_spend("no-such-run")["calls"] == 0


def test_transaction_rolls_back_on_error(store):
    run = store.create_run(None, "auto", {})
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add_node(run, None, code="x")
            store.add_node(run, None, code="y")
            raise RuntimeError("stop")
    assert store.nodes(run) == []


def test_read_only_store(tmp_path):
    path = tmp_path / "ro.duckdb"
    with pytest.raises(StoreError, match="no mk store"):
        Store.open(path, read_only=True)
    with Store.open(path) as s:
        run = s.create_run(None, "auto", {})
    with Store.open(path, read_only=True) as ro:
        assert ro.get_run(run)["mode"] == "auto"
        with pytest.raises(StoreError, match="read-only"):
            ro.create_run(None, "auto", {})


# --- processes ----------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, time
    from mk.store import Store
    store = Store.open(sys.argv[1])
    run = store.create_run(None, "search", {})
    a = store.add_node(run, None, code="committed-1")
    store.add_node(run, a, code="committed-2")
    store._conn.begin()  # a transaction that will never commit
    store._conn.execute("INSERT INTO runs VALUES ('in-flight', NULL, 'x', '{}', 'running', NULL, now()::TIMESTAMP, NULL)")
    print(run, flush=True)
    time.sleep(60)
    """
)


def _start_child(path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        pytest.fail(f"child failed: {proc.stderr.read()}")
    return proc, line


def test_second_writer_gets_a_clear_error_and_a_kill_keeps_committed_rows(tmp_path):
    path = tmp_path / "crash.duckdb"
    proc, run = _start_child(path)
    try:
        with pytest.raises(StoreError) as info:
            Store.open(path)
        msg = str(info.value)
        assert str(path) in msg and "--db" in msg and "one writing process" in msg
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    deadline = time.time() + 10
    while True:  # the lock goes with the process
        try:
            store = Store.open(path)
            break
        except StoreError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)
    with store:
        assert store.get_run(run) is not None
        assert sorted(n["code"] for n in store.nodes(run)) == ["committed-1", "committed-2"]
        assert len(store.edges(run)) == 1
        assert store.get_run("in-flight") is None  # never committed
