"""`mk runs`, `mk show RUN [--json]`, `mk resume RUN` over a search the store holds."""

from __future__ import annotations

import json

import pytest

import search_support as sup
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
    assert "cannot be resumed" in capsys.readouterr().err  # an auto run with no task record


def test_resume_an_interrupted_auto_run_writes_its_kernel(tmp_path, capsys):
    """An `mk optimize` (auto) run stopped after its first snapshot is continued by `mk resume` from the store."""
    import json as _json
    from pathlib import Path as _Path

    from mk.author.adapter import OfflineAuthorAdapter
    from mk.cli import main
    from mk.loaders import load_task
    from mk.programs.auto import Auto
    from mk.store import Store

    examples = _Path(__file__).resolve().parents[1] / "examples"
    task = load_task(examples / "softmax.py")
    task = task.with_scales({"ci": task.scale("ci")})
    db = tmp_path / "db.duckdb"
    with Store.open(db) as store:
        auto = Auto(OfflineAuthorAdapter(), target="tpu", iterations=2, store=store, max_trials=1)
        traj = auto.start(task)
        while not traj.snapshots:  # ... and then the process dies: the run stays "running"
            auto.step(traj)
        run_id = traj.run_id
        assert store.get_run(run_id)["status"] == "running"
    rc = main(["resume", run_id[:10], "--db", str(db), "--out", str(tmp_path / "out"), "--json"])
    summary = _json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and summary["status"] == "correct" and summary["resumed_from"] == 1
    assert summary["snapshots"] >= 1 and _Path(summary["kernel_path"]).is_file()
    with Store.open(db) as store:
        assert store.get_run(run_id)["status"] == "correct"
        assert len(store.snapshots(run_id)) == summary["snapshots"]  # nothing redone


def test_show_piped_prints_verdict_reasons_whole(tmp_path):
    """`mk show` into a pipe: a node's long verdict reason and the run's reason come whole, each on one line."""
    import subprocess
    import sys

    db = str(tmp_path / "long.duckdb")
    long_reason = "incorrect at scale ci: " + " ".join(f"case{i} max abs err 1.{i}e-2" for i in range(40)) + " END-OF-REASON"
    with Store.open(db) as store:
        run_id = store.create_run(None, "auto", {"target": "cpu"})
        store.add_node(run_id, code="def kernel(x):\n    return x\n", plan="p", code_hash="h", status="incorrect",
                       reason=long_reason, depth=1, meta={"key": "n0", "head": "tiled"})
        store.finish_run(run_id, "no_correct_candidate", "run reason " + "x" * 400 + " END-OF-RUN-REASON")
    proc = subprocess.run([sys.executable, "-m", "mk", "show", run_id, "--db", db], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(long_reason) > 600
    (line,) = [ln for ln in proc.stdout.splitlines() if "END-OF-REASON" in ln]
    assert line.rstrip().endswith(long_reason)  # whole, not cut at 160 characters nor wrapped at the console's width
    assert any(ln.rstrip().endswith("x" * 400 + " END-OF-RUN-REASON") for ln in proc.stdout.splitlines())


def test_a_stop_reason_of_many_lines_prints_as_a_table(tmp_path, capsys):
    """Issue 24, item 5: a no-kernel run's reason is a head line and one line per declined rule; `mk show` prints the
    rows under the head, `mk runs` keeps one row per run, and `--json` has the reason whole."""
    from mk.contracts import declined_reason

    db = str(tmp_path / "table.duckdb")
    declined = {"matmul": "the matmul template needs a top-level matrix product, found none",
                "rowwise": "primitive 'cumsum' has no block-local form in mk's emitter"}
    reason = declined_reason(declined)
    with Store.open(db) as store:
        run_id = store.create_run(None, "auto", {"target": "tpu"})
        store.finish_run(run_id, "no_correct_candidate", reason)
    assert main(["show", run_id, "--db", db]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("  " + reason.splitlines()[0])
    assert out[at + 1:at + 3] == ["  " + row for row in reason.splitlines()[1:]]
    assert out[at + 1].startswith("    matmul:") and out[at + 2].startswith("    rowwise:")
    assert main(["runs", "--db", db]) == 0
    table = capsys.readouterr().out
    assert run_id[:12] in table and "matmul" not in table  # the table: one row per run, no reason lines
    assert main(["runs", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["reason"] == reason


def test_hitl_piped_panels_are_not_80_columns(tmp_path):
    """`mk hitl` into a pipe: a panel is as wide as its text, so a plan's line is not wrapped at 80 columns."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    task = Path(__file__).resolve().parent / "fixtures" / "small" / "rmsnorm.py"  # the example, small full size
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("EDITOR", None)
    proc = subprocess.run([sys.executable, "-m", "mk", "hitl", str(task), "--lm", "offline", "--target", "tpu", "--scale", "ci",
                           "--db", str(tmp_path / "h.duckdb"), "--out", str(tmp_path / "out"), "--trials", "1"],
                          input="q\n", capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    top = next(i for i, ln in enumerate(lines) if ln.startswith("╭─ plan: ok"))
    bottom = next(i for i, ln in enumerate(lines) if i > top and ln.startswith("╰"))
    body = lines[top + 1:bottom]
    assert len(lines[top]) > 80 and all(len(ln) == len(lines[top]) for ln in body)  # one box, wider than 80 columns
    assert len(body) == 2 and "one pass over HBM" in body[1]  # the plan's name and its one line of text, unwrapped


@pytest.mark.parametrize("body, dtype, words", [
    ("x @ w", "float32", "dot_general"),  # shapes the reference cannot take
    ("jnp.bitwise_and(x, w)", "float32", "subtypes of integer"),  # a dtype it cannot take (JAX: "... are subtypes of integer, bool")
], ids=["shape", "dtype"])
def test_a_run_that_never_started_is_failed_with_its_reason_not_killed(body, dtype, words, tmp_path, capsys):
    """A task whose reference fails at its shapes or dtypes ends in a usage error before its suite is frozen: the run
    is stored `failed` with that reason, and `mk runs`/`mk show` no longer call it `killed` with a resume command."""
    bad = tmp_path / "badtask.py"
    bad.write_text("import jax.numpy as jnp\nfrom mk.task import ArgSpec, Scale, Task\n\n"
                   f"def ref(x, w):\n    return {body}\n\n"
                   f"TASK = Task('badtask', ref, (ArgSpec('x', ('M', 'N'), '{dtype}'), ArgSpec('w', ('M', 'N'), '{dtype}')),\n"
                   "            {'ci': Scale('ci', {'M': 8, 'N': 128})})\n")
    db = str(tmp_path / "never.duckdb")
    for command in ("optimize", "hitl"):
        assert main([command, str(bad), "--target", "cpu", "--lm", "offline", "--db", db, "--out", str(tmp_path / "o")]) == 2
    capsys.readouterr()
    assert main(["runs", "--db", db, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["mode"] for r in rows) == ["auto", "hitl"] and {r["status"] for r in rows} == {"failed"}
    for row in rows:
        assert main(["show", row["id"], "--db", db]) == 0
        out = capsys.readouterr().out
        assert "failed" in out and "never started" in out and words in str(row.get("reason")), (out, row)
        assert "killed" not in out and "resume" not in out


def test_show_of_a_resumed_running_run_has_no_stale_interrupt_line(tmp_path, capsys):
    """An interrupted run continued by a resume is running again: `mk show` used to print the old "interrupted ...
    continue it with" line under it."""
    from mk.run import Run, RunConfig

    db = tmp_path / "r.duckdb"
    with Store.open(db) as store:
        run_id = store.create_run(None, "auto", {"target": "cpu"})
        store.interrupt_run(run_id, "1 snapshot kept")
        Run(store, run_id, RunConfig(mode="auto", target="cpu"), None).restart()  # this (live) process writes it
    assert main(["show", run_id, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"{run_id}" in out and "running" in out
    assert "interrupted" not in out and "continue it with" not in out
