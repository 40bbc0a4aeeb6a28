"""`mk runs`, `mk show RUN [--json]`, `mk resume RUN` over a search the store holds."""

from __future__ import annotations

import json

import test_search_support as sup
from mk.cli import main
from mk.loaders import load_task
from mk.programs.search import Search
from mk.store import Store


def _search(db, tmp_path):
    task = load_task(str(sup.write_task(tmp_path)))
    with Store.open(db) as store:
        return Search(sup.ScriptedAuthor, algorithm="greedy", depth=2, branches=2, target="cpu", workers="inline",
                      evaluate=sup.stub_evaluate, store=store, tune=False).run(task)


def test_runs_show_and_resume(tmp_path, capsys):
    db = str(tmp_path / "cli.duckdb")
    res = _search(db, tmp_path)
    assert main(["runs", "--db", db]) == 0
    out = capsys.readouterr().out
    assert res.run_id[:12] in out and "search" in out and "tanh2" in out

    assert main(["show", res.run_id[:10], "--db", db, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["best"]["key"] == res.best.key and info["best"]["speedup"] == res.best.speedup
    assert [n["key"] for n in info["lineage"]] == [n.key for n in res.lineage(res.best)]
    assert {n["key"]: n["status"] for n in info["nodes"]} == {n.key: n.status for n in res.nodes}
    assert main(["show", res.run_id, "--db", db]) == 0
    assert "lineage:" in capsys.readouterr().out

    # simulate a kill after the first level: drop the deeper nodes (and their rows), mark the run running again
    with Store.open(db) as store:
        deep = [n.node_id for n in res.nodes if n.depth > 1]
        for table, col in (("evaluations", "node_id"), ("snapshots", "node_id"), ("edges", "child_id"), ("nodes", "id")):
            store.executemany(f"DELETE FROM {table} WHERE {col} = ?", [[i] for i in deep])
        store.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE id = ?", [res.run_id])
    assert main(["resume", res.run_id, "--db", db, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_from"] == len(res.nodes) - len(deep) and summary["nodes"] == len(res.nodes)
    assert summary["best_node"] == res.best.key
    with Store.open(db) as store:
        assert store.get_run(res.run_id)["status"] == "correct"


def test_show_unknown_run_and_resume_non_search(tmp_path, capsys):
    db = str(tmp_path / "cli.duckdb")
    with Store.open(db) as store:
        rid = store.create_run(None, "auto", {"target": "cpu"})
    assert main(["show", "nope", "--db", db]) != 0
    assert "no run matches" in capsys.readouterr().err
    assert main(["resume", rid, "--db", db]) != 0
    assert "not a search" in capsys.readouterr().err
