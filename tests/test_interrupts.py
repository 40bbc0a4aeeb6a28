"""Ctrl-C ends a run cleanly in every mode: the run is marked interrupted, the message names it and the command
that continues it, and that command finishes the run without losing the frozen suite or the scale."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from child_signals import default_signals
from mk.store import Store

EXAMPLE = Path(__file__).resolve().parent / "fixtures" / "small" / "softmax.py"  # the example with a small full size

pytestmark = pytest.mark.slow


def _interrupt(args, tmp_path, wait_for: str, stdin: str | None = None, sig=signal.SIGINT, stdout_marks: bool = False):
    """Start `mk ARGS`, send ``sig`` once ``wait_for`` shows in its stderr (or, with ``stdout_marks``, in either
    output), and return (returncode, stdout, stderr)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        if stdout_marks:
            err.close()
            err = open(err_path, "w")
        proc = subprocess.Popen([sys.executable, "-m", "mk", *args], stdout=err if stdout_marks else subprocess.PIPE, stderr=err,
                                text=True, env=env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                preexec_fn=default_signals)
        seen = ""
        deadline = time.monotonic() + 300
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.flush()
        while time.monotonic() < deadline and proc.poll() is None:
            seen = err_path.read_text()
            if wait_for in seen:
                break
            time.sleep(0.2)
        assert wait_for in err_path.read_text(), err_path.read_text()[-2000:]
        time.sleep(0.5)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    return proc.returncode, out, err_path.read_text()


def _run_id(text: str) -> str:
    return text.split("run ", 1)[1].split(" interrupted", 1)[0].split()[-1]


@pytest.mark.parametrize("mode", ["auto", "search"])
def test_ctrl_c_then_resume(tmp_path, mode):
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    # one round and one trial: what is proved is the interrupt and the resume, not the search or the tuning
    args = ["-v", "optimize", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out,
            "--iterations", "1", "--trials", "1"]
    if mode == "search":
        args += ["--mode", "search", "--workers", "inline"]
    rc, _, err = _interrupt(args, tmp_path, "mk.harness.isolation")  # the run exists and its first candidate is judged
    assert rc == 130 and " interrupted; " in err and "continue it with: mk resume " in err, err[-2000:]
    run_id = _run_id(err)
    with Store.open(db) as store:
        run = store.get_run(run_id)
    assert run["status"] == "interrupted" and f"mk resume {run_id}" in run["reason"]
    again = subprocess.run([sys.executable, "-m", "mk", "resume", run_id, "--db", db, "--out", out, "--json"],
                           capture_output=True, text=True, timeout=600)
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["status"] == "correct", (summary, again.stderr[-2000:])
    assert "frozen suite changed" not in again.stderr
    assert "--scale ci" in Path(summary["kernel_path"]).read_text()


def test_ctrl_c_in_hitl_names_its_own_resume_command(tmp_path):
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    args = ["-v", "hitl", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out,
            "--iterations", "2", "--trials", "1"]
    rc, _, err = _interrupt(args, tmp_path, "mk.harness.isolation", stdin="a\na\na\n")
    assert rc == 130 and "continue it with: mk hitl --resume " in err and f"--db {db}" in err, err[-2000:]
    run_id = _run_id(err)
    with Store.open(db) as store:
        assert store.get_run(run_id)["status"] == "interrupted"
    again = subprocess.run([sys.executable, "-m", "mk", "hitl", "--resume", run_id, "--db", db, "--out", out],
                           input="a\n" * 40, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert list(Path(out).glob("softmax_tpu.py"))


def test_sigterm_ends_a_run_like_ctrl_c(tmp_path):
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    args = ["-v", "optimize", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out,
            "--iterations", "1", "--trials", "1"]
    rc, _, err = _interrupt(args, tmp_path, "mk.harness.isolation", sig=signal.SIGTERM)
    assert rc == 130 and " interrupted; " in err and "continue it with: mk resume " in err, err[-2000:]
    with Store.open(db) as store:
        assert store.get_run(_run_id(err))["status"] == "interrupted"


def test_sigkill_then_resume_keeps_the_snapshots_and_redoes_none(tmp_path):
    """A killed process cannot mark its run; `mk resume` still continues it from what was written."""
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    args = ["-v", "optimize", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out,
            "--iterations", "3", "--trials", "0"]
    _interrupt(args, tmp_path, "mk.harness.isolation", sig=signal.SIGKILL)  # mid-judging: nothing can mark the run
    with Store.open(db) as store:
        (run,) = store.list_runs()
        kept = store.snapshots(run["id"])
        codes = [s["code"] for s in kept]
    assert run["status"] == "running", run
    again = subprocess.run([sys.executable, "-m", "mk", "resume", run["id"], "--db", db, "--json"],
                           capture_output=True, text=True, timeout=600)
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["resumed_from"] == len(kept) and summary["status"] == "correct", (summary, again.stderr[-2000:])
    assert summary["report_path"].startswith(out) and Path(summary["report_path"]).is_file()  # the run's own --out
    with Store.open(db) as store:
        after = store.snapshots(run["id"])
        assert store.get_run(run["id"])["status"] == "correct"
    assert [s["code"] for s in after[:len(kept)]] == codes  # nothing lost
    assert len({s["code"] for s in after}) == len(after)  # nothing tried twice


def test_sigkill_in_hitl_then_resume_keeps_what_was_approved(tmp_path):
    """A killed HITL session cannot mark its run; `mk hitl --resume` continues it from its snapshots, at its scale."""
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    args = ["-v", "hitl", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out,
            "--iterations", "2", "--trials", "1"]
    _interrupt(args, tmp_path, "mk.harness.isolation", stdin="a\na\na\n", sig=signal.SIGKILL)
    with Store.open(db) as store:
        (run,) = store.list_runs()
        kept = [s["code"] for s in store.snapshots(run["id"])]
    assert run["status"] == "running", run
    again = subprocess.run([sys.executable, "-m", "mk", "hitl", "--resume", run["id"], "--db", db, "--out", out],
                           input="a\n" * 40, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    with Store.open(db) as store:
        after = [s["code"] for s in store.snapshots(run["id"])]
        assert store.get_run(run["id"])["status"] == "correct"
    assert after[:len(kept)] == kept and len(set(after)) == len(after)  # nothing lost, nothing tried twice
    assert "--scale ci" in next(Path(out).glob("softmax_tpu.py")).read_text()


def _head(params, x):
    return (x @ params["w"]).sum(axis=1, keepdims=True)


def test_ctrl_c_in_mk_optimize_names_mk_resume_which_continues_it(tmp_path, capsys):
    """Ctrl-C inside mk.optimize: the KeyboardInterrupt names mk.resume (`mk resume` cannot load a Python function and
    says so, naming it too); mk.resume(run_id) continues it in this process, mk.resume(run_id, fn, shapes) in any."""
    import mk
    from mk import api
    from mk.cli import main

    shapes = [{"w": ((64, 48), "float32")}, ((32, 64), "float32")]
    where = {"db": tmp_path / "py.duckdb", "out": tmp_path / "out"}

    def stop_once_frozen(kind, data):
        if kind == "suite":
            raise KeyboardInterrupt

    common = {"target": "cpu", "lm": "offline", "iterations": 1, "max_trials": 1, **where}
    for n in range(2):  # resumed in this process, then as another process would (the function and shapes given)
        with pytest.raises(KeyboardInterrupt) as stopped:
            mk.optimize(_head, shapes, on_event=stop_once_frozen, cache=False, **common)
        message = str(stopped.value)
        run_id = message.split("run ", 1)[1].split(" interrupted", 1)[0]
        assert f"continue it with: mk.resume({run_id!r}, db=" in message and "mk resume" not in message
        assert main(["resume", run_id, "--db", str(where["db"])]) == 2
        assert f"mk.resume({run_id!r}" in capsys.readouterr().err
        if n == 0:
            fast = mk.resume(run_id, db=where["db"])
        else:
            api._INTERRUPTED.clear()
            with pytest.raises(mk.MkError, match="not started by an mk.optimize interrupted in this Python process"):
                mk.resume(run_id, db=where["db"])
            fast = mk.resume(run_id, _head, shapes, db=where["db"])
        assert fast.report.status == "correct" and fast.report.run_id == run_id, fast.report.stop_reason
        with Store.open(where["db"]) as store:
            assert store.get_run(run_id)["status"] == "correct"
        assert mk.optimize(_head, shapes, **common).cached  # the resumed result is what the next call gets
