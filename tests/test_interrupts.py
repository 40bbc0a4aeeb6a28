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

from mk.store import Store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "softmax.py"

pytestmark = pytest.mark.slow


def _interrupt(args, tmp_path, wait_for: str, stdin: str | None = None):
    """Start `mk ARGS`, send SIGINT once ``wait_for`` shows in its output, and return (returncode, stdout, stderr)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mk", *args], stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
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
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    return proc.returncode, out, err_path.read_text()


def _run_id(text: str) -> str:
    return text.split("run ", 1)[1].split(" interrupted", 1)[0].split()[-1]


@pytest.mark.parametrize("mode", ["auto", "search"])
def test_ctrl_c_then_resume(tmp_path, mode):
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    args = ["-v", "optimize", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out]
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
    args = ["-v", "hitl", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--db", db, "--out", out]
    rc, _, err = _interrupt(args, tmp_path, "mk.harness.isolation", stdin="a\na\na\n")
    assert rc == 130 and f"continue it with: mk hitl --resume " in err and f"--db {db}" in err, err[-2000:]
    run_id = _run_id(err)
    with Store.open(db) as store:
        assert store.get_run(run_id)["status"] == "interrupted"
    again = subprocess.run([sys.executable, "-m", "mk", "hitl", "--resume", run_id, "--db", db, "--out", out],
                           input="a\n" * 40, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert list(Path(out).glob("softmax_tpu.py"))
