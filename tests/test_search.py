"""Search(Auto): beam, greedy and parallel over a scripted author; dedup by hash; kill -9 and resume; workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import search_support as sup
from mk.errors import ConfigError
from mk.loaders import load_task
from mk.programs.search import Search, SearchConfig
from mk.store import Store

TESTS = Path(__file__).parent


@pytest.fixture
def task(tmp_path):
    return load_task(str(sup.write_task(tmp_path)))


def _search(store, **kw):
    opts = dict(target="cpu", workers="inline", evaluate=sup.stub_evaluate, store=store, tune=False)
    opts.update(kw)
    return Search(sup.ScriptedAuthor, **opts)


def test_beam_expands_the_best_and_never_reevaluates_a_duplicate(task, tmp_path):
    sup.CALLS.clear()
    with Store.open(tmp_path / "s.duckdb") as store:
        res = _search(store, algorithm="beam", width=1, depth=2, branches=3).run(task)
        nodes = {n.key: n for n in res.nodes}
        assert sorted(nodes) == ["n0", "n1", "n1.0", "n1.1", "n1.2", "n2"]
        # level 1: three different plans (siblings avoid each other's choice)
        assert [nodes[k].plan for k in ("n0", "n1", "n2")] == ["slow", "mid", "wrong"]
        # level 2 expands only the fastest correct node (width 1); the child re-planning 'slow' got a duplicate verdict
        assert nodes["n1.0"].status == "duplicate" and "n0" in nodes["n1.0"].reason
        assert nodes["n1.2"].plan == "fast" and nodes["n1.2"].status == "correct"
        assert res.best.key == "n1.2" and res.best.speedup == 3.0
        assert [n.key for n in res.lineage(res.best)] == ["n1", "n1.2"]
        # every distinct source was judged, duplicates never: validate + test per correct candidate, one call per wrong one
        assert sorted(set(sup.CALLS)) == sorted({sup.SLOW, sup.MID, sup.WRONG, sup.FAST})
        assert len(sup.CALLS) == 2 + 2 + 1 + 2
        # the graph is in the store: nodes, parent->child edges, snapshots, evaluations; the run says where the best is
        edges = store.edges(res.run_id)
        assert {(e["parent_id"], e["child_id"]) for e in edges} == {(nodes["n1"].node_id, nodes[k].node_id) for k in ("n1.0", "n1.1", "n1.2")}
        assert len(store.snapshots(res.run_id)) == 6
        run = store.get_run(res.run_id)
        assert run["status"] == "correct" and "best: node n1.2" in run["reason"]
        assert run["config"]["settings"]["algorithm"] == "beam" and run["config"]["author"] == "search_support:ScriptedAuthor"


def test_greedy_follows_one_line_and_children_see_the_lineage(task, tmp_path):
    seen = []

    class Recording(sup.ScriptedAuthor):
        def plan(self, ctx):
            seen.append(ctx.feedback)
            return super().plan(ctx)

    with Store.open(tmp_path / "s.duckdb") as store:
        res = Search(Recording, algorithm="greedy", depth=3, branches=2, target="cpu", workers="inline",
                     evaluate=sup.stub_evaluate, store=store, tune=False).run(task)
    keys = [n.key for n in res.nodes]
    assert keys == ["n0", "n1", "n1.0", "n1.1", "n1.1.0", "n1.1.1"]
    assert res.best.key == "n1.1.1" and [n.key for n in res.lineage(res.best)] == ["n1", "n1.1", "n1.1.1"]
    # the deepest plans were asked with the ancestors' verdicts and the siblings' choices in the feedback
    assert any("node n1.1 (depth 2): incorrect" in f and "node n1 (depth 1): correct" in f for f in seen)
    assert any("Sibling branches already chose: slow" in f for f in seen)


def test_parallel_runs_independent_chains(task, tmp_path):
    with Store.open(tmp_path / "s.duckdb") as store:
        res = _search(store, algorithm="parallel", width=2, depth=3, iterations=2).run(task)
        rows = store.nodes(res.run_id)
    by_key = {n.key: n for n in res.nodes}
    # two chains; at depth 3 the lineage has tried all four candidates, so the author has no new plan and the chains end
    assert sorted(by_key) == ["n0", "n0.0", "n1", "n1.0"]
    assert by_key["n0.0"].parent_key == "n0" and by_key["n1.0"].parent_key == "n1"
    assert all(len(n.summaries) == 2 for n in res.nodes)  # each node is a short Auto session of 2 iterations
    assert {r["depth"] for r in rows} == {1, 2}
    assert res.best.speedup == 3.0


def test_config_errors_say_what_to_do(task, tmp_path):
    with pytest.raises(ConfigError, match="unknown search algorithm"):
        SearchConfig(algorithm="evolutionary")
    with pytest.raises(ConfigError, match="at least 1"):
        SearchConfig(width=0)
    with Store.open(tmp_path / "s.duckdb") as store:
        with pytest.raises(ConfigError, match="cannot be sent"):
            Search(sup.ScriptedAuthor, target="cpu", workers="process", evaluate=lambda *a, **k: None, store=store,
                   tune=False).run(task)


def test_ray_backend_without_ray_is_a_config_error(monkeypatch):
    from mk.programs.search_workers import make_pool

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError) as err:
        make_pool("ray", 1)
    assert 'pip install "mk[ray]"' in str(err.value)


KILL_SCRIPT = textwrap.dedent("""
    import json, sys
    import search_support as sup
    from mk.loaders import load_task
    from mk.programs.search import Search
    from mk.store import Store

    db, task_path, progress = sys.argv[1:4]
    def on_event(kind, data):
        with open(progress, "a") as f:
            f.write(json.dumps({"kind": kind, **{k: v for k, v in data.items() if k in ("run_id", "key", "node_id")}}) + "\\n")
    if __name__ == "__main__":
        with Store.open(db) as store:
            Search(sup.ScriptedAuthor, algorithm="beam", width=2, depth=2, branches=2, target="cpu", workers="inline",
                   evaluate=sup.stub_evaluate, store=store, tune=False, on_event=on_event).run(load_task(task_path))
""")


@pytest.mark.slow
def test_sigkill_mid_search_then_resume_loses_and_redoes_nothing(task, tmp_path):
    script = tmp_path / "kill_me.py"
    script.write_text(KILL_SCRIPT)
    db, progress = tmp_path / "killed.duckdb", tmp_path / "progress.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), "MK_TEST_STUB_SLEEP": "0.4"}
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(task.source), str(progress)], env=env)
    try:
        deadline = time.time() + 120
        events = []
        while time.time() < deadline and proc.poll() is None:
            if progress.exists():
                events = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
                if any(e["kind"] == "node" for e in events):
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the search finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = next(e["run_id"] for e in events if e["kind"] == "search")
    with Store.open(db) as store:
        before = {r["meta"]["key"]: r["id"] for r in store.nodes(run_id)}
        assert 1 <= len(before) < 6 and store.get_run(run_id)["status"] == "running"
        sup.CALLS.clear()
        resumed = Search.resume(run_id, store=store)  # author and judge rebuilt from the run's config
        after = store.nodes(run_id)
    keys = [r["meta"]["key"] for r in after]
    assert len(keys) == len(set(keys))  # nothing redone
    assert all(any(r["id"] == nid for r in after) for nid in before.values())  # nothing lost
    redone = {k for k in keys if k not in before}
    with Store.open(tmp_path / "whole.duckdb") as store:
        whole = _search(store, algorithm="beam", width=2, depth=2, branches=2).run(task)
    assert len(after) == len(whole.nodes) == len(resumed.nodes)
    assert sorted(keys) == sorted(n.key for n in whole.nodes)
    assert redone  # the resume ran the missing nodes
    assert resumed.status == "correct"


@pytest.mark.slow
def test_process_pool_with_the_real_harness(task, tmp_path):
    """Spawned workers reload the task from its locator and judge with the real harness; the orchestrator writes."""
    with Store.open(tmp_path / "s.duckdb") as store:
        res = Search("search_support:ScriptedAuthor", algorithm="beam", depth=1, branches=3, target="cpu", workers="process",
                     max_workers=2, store=store, tune=False).run(task)
        evals = store.query("SELECT node_id, status FROM evaluations WHERE run_id = ?", [res.run_id])
    verdicts = {n.plan: n.status for n in res.nodes}
    assert verdicts == {"slow": "correct", "mid": "correct", "wrong": "incorrect"}
    assert {e["node_id"] for e in evals} == {n.node_id for n in res.nodes}
    assert res.best is not None and res.best.plan in ("slow", "mid")


@pytest.mark.slow
def test_ray_backend_on_a_local_instance(task, tmp_path):
    ray = pytest.importorskip("ray", reason='Ray is optional: pip install "mk[ray]"')
    try:
        with Store.open(tmp_path / "s.duckdb") as store:
            res = _search(store, algorithm="beam", width=1, depth=2, branches=2, workers="ray", max_workers=1).run(task)
        assert sorted(n.key for n in res.nodes) == ["n0", "n1", "n1.0", "n1.1"]
        assert res.best.speedup == 2.0
    finally:
        ray.shutdown()


def test_evolve_keeps_elites_per_niche_mutates_and_crosses_over_and_resumes(task, tmp_path):
    seen = []

    class Recording(sup.ScriptedAuthor):
        def plan(self, ctx):
            seen.append(ctx.feedback)
            return super().plan(ctx)

    db = tmp_path / "e.duckdb"
    with Store.open(db) as store:
        res = Search(Recording, algorithm="evolve", width=2, depth=2, branches=1, target="cpu", workers="inline",
                     evaluate=sup.stub_evaluate, store=store, tune=False).run(task)
        rows = {r["meta"]["key"]: r for r in store.nodes(res.run_id)}
        run = store.get_run(res.run_id)
    by_key = {n.key: n for n in res.nodes}
    assert [k for k in by_key if by_key[k].depth == 1] == ["n0", "n1"]  # the seed population
    (cross,) = [k for k, r in rows.items() if r["meta"].get("mate_key")]
    assert cross == "n1.g2x" and rows[cross]["meta"]["mate_key"] == "n0"  # the two fastest elites of different niches
    assert any("crossover: combine" in f and "second parent's kernel (node n0)" in f and sup.SLOW.strip() in f for f in seen)
    assert any("mutation: rewrite the parent's kernel" in f and "The parent's kernel" in f for f in seen)
    # children are new variants: no plan any node already took is tried again
    assert by_key[cross].plan == "wrong" and res.best.plan == "fast" and res.best.speedup == 3.0
    assert run["status"] == "correct" and "evolve search finished" in run["reason"]
    # resumable like the others: drop generation 2, resume, get the same children back
    with Store.open(db) as store:
        deep = [r["id"] for k, r in rows.items() if r["depth"] > 1]
        for table, col in (("evaluations", "node_id"), ("snapshots", "node_id"), ("edges", "child_id"), ("nodes", "id")):
            store.executemany(f"DELETE FROM {table} WHERE {col} = ?", [[i] for i in deep])
        again = Search.resume(res.run_id, store=store, author=Recording, evaluate=sup.stub_evaluate)
    assert sorted(n.key for n in again.nodes) == sorted(by_key) and again.best.plan == "fast"


def test_evolve_through_the_cli_offline(tmp_path):
    from mk.cli import main

    example = Path(__file__).resolve().parent / "fixtures" / "small" / "softmax.py"  # the example with a small full size
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    rc = main(["optimize", str(example), "--lm", "offline", "--target", "cpu", "--scale", "ci", "--mode", "search",
               "--algorithm", "evolve", "--width", "1", "--depth", "2", "--branches", "1", "--workers", "inline",
               "--trials", "0", "--db", db, "--out", out, "--json"])
    report = json.loads(next(Path(out).glob("*.report.json")).read_text())
    assert report["mode"] == "search" and "evolve search" in report["stop_reason"], report["stop_reason"]
    with Store.open(db) as store:
        (run,) = store.list_runs()
        assert run["config"]["settings"]["algorithm"] == "evolve" and run["status"] == report["status"]
    assert rc == (0 if report["status"] == "correct" else 1)
