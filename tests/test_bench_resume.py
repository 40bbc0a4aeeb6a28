"""`mk bench` stopped by Ctrl-C or killed, then `mk bench --resume BENCH_ID`: the finished (task, method) pairs are
kept and not run again, the rest run, and the benchmark ends finished with one report (real CLI, subprocesses)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from child_signals import default_signals
from mk.store import Store

from bench_support import RMS, TANH, _suite

pytestmark = pytest.mark.slow

ROW = re.compile(r"correct\s+best-of-n (\w+)")


def _bench(args):
    return [sys.executable, "-m", "mk", "bench", *args]


def _start_and_stop(tmp_path, sig):
    root = _suite(tmp_path, {"rms": RMS, "tanh2": TANH, "rms_b": RMS.replace('"rms"', '"rms_b"')})
    db, out = tmp_path / "b.duckdb", tmp_path / "report"
    args = [str(root), "--lm", "offline", "--target", "tpu", "--mode", "best-of-n", "--samples", "1", "--db", str(db),
            "--out", str(out), "--no-plots"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(_bench(args), stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                preexec_fn=default_signals)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None and not ROW.search(err_path.read_text()):
            time.sleep(0.2)
        first = ROW.findall(err_path.read_text())
        assert first, err_path.read_text()[-2000:]
        proc.send_signal(sig)
        proc.communicate(timeout=600)  # a Ctrl-C waits for an XLA compile in progress in the process
    return proc.returncode, err_path.read_text(), db, out, first


def _resume(db, bench_id):
    again = subprocess.run([sys.executable, "-m", "mk", "bench", "--resume", bench_id, "--db", str(db), "--json"],
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    return json.loads(again.stdout.strip().splitlines()[-1])


def _runs_per_task(db):
    with Store.open(db) as store:
        rows = store.query("SELECT task_name, count(DISTINCT run_id) AS n FROM evaluations GROUP BY task_name")
    return {r["task_name"]: r["n"] for r in rows}


def test_ctrl_c_then_resume_keeps_the_finished_tasks(tmp_path):
    rc, err, db, out, first = _start_and_stop(tmp_path, signal.SIGINT)
    assert rc == 130 and "continue it with: mk bench --resume " in err, err[-2000:]
    bench_id = err.split("mk bench --resume ", 1)[1].split()[0]
    with Store.open(db) as store:
        assert store.query("SELECT status FROM bench_runs")[0]["status"] == "interrupted"
        # the task run cut short is marked, not left running; the partial report says it is partial
        assert not store.query("SELECT id FROM runs WHERE status = 'running'")
    assert "this report is partial" in json.loads((out / "results.json").read_text())["stop_reason"]
    summary = _resume(db, bench_id)
    assert summary["bench_id"] == bench_id and {t["task"] for t in summary["tasks"]} == {"rms", "tanh2", "rms_b"}
    assert all(t["correct"] for t in summary["tasks"]), summary["tasks"]
    runs = _runs_per_task(db)
    assert all(runs[t] == 1 for t in first), runs  # a task finished before Ctrl-C is not run again
    with Store.open(db) as store:
        assert store.query("SELECT status FROM bench_runs")[0]["status"] == "finished"
    assert (out / "report.md").is_file() and "rms_b" in (out / "report.md").read_text()  # the run's own --out
    # a finished benchmark is not resumed; a run command given a bench id says which command to use
    done = subprocess.run([sys.executable, "-m", "mk", "bench", "--resume", bench_id, "--db", str(db)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "already finished" in done.stderr
    wrong = subprocess.run([sys.executable, "-m", "mk", "resume", bench_id[:10], "--db", str(db)],
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and f"mk bench --resume {bench_id}" in " ".join(wrong.stderr.split())


def test_sigkill_then_resume_runs_only_what_was_left(tmp_path):
    rc, err, db, out, first = _start_and_stop(tmp_path, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    # nothing printed the bench id before the kill: `mk bench --list` gives it, with its state and the resume command
    listed = subprocess.run(_bench(["--list", "--db", str(db), "--json"]), capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    (bench,) = json.loads(listed.stdout)
    assert bench["status"] == "killed" and bench["stored_status"] == "running"  # nothing could mark it; --list tells
    assert bench["rows"] >= len(first) and bench["resume"] == f"mk bench --resume {bench['id']} --db {db}"
    text = subprocess.run(_bench(["--list", "--db", str(db)]), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "300"})
    assert bench["id"] in text.stdout and "killed" in text.stdout
    summary = _resume(db, bench["id"])
    assert {t["task"] for t in summary["tasks"]} == {"rms", "tanh2", "rms_b"} and all(t["correct"] for t in summary["tasks"])
    kept = [t for t in summary["tasks"] if t["task"] in first]
    assert kept and all(t["best"] for t in kept), kept  # a row kept from before the kill keeps its best kernel's name
    report = (out / "report.md").read_text()
    for t in summary["tasks"]:
        assert f"| {t['task']} | best-of-n | correct |" in report and report.split(f"| {t['task']} | best-of-n |")[1].split("\n")[0].rstrip(" |").endswith(t["best"])
    with Store.open(db) as store:  # the killed task run is closed by the resume, not left running
        assert not store.query("SELECT id FROM runs WHERE status = 'running'")
    runs = _runs_per_task(db)
    assert all(runs[t] == 1 for t in first), runs
