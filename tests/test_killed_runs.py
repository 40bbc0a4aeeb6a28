"""A run or benchmark whose process was SIGKILLed shows `killed` (with the command that continues it) in `mk runs`,
`mk show RUN` and `mk bench --list` — whether the store is free or another process holds it — while one whose
writer is alive (a HITL session between phases, another process holding the store) stays `running`; the stored
rows are never rewritten by a read command. Real CLI in subprocesses; each writer is a tiny Python process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from mk.store import Store, shown_status, writer_fields, writer_state

KILLED_RUN = """
import os, signal
from mk.store import Store
s = Store.open({db!r})
print(s.create_run(None, {mode!r}, {{"target": "cpu"}}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
KILLED_BENCH = """
import os, signal
from mk.bench.record import create_bench
from mk.store import Store
s = Store.open({db!r})
print(create_bench(s, "jaxbench", "cpu", "ci", ["auto"], "offline", {{}}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
# a live writer: makes a run and a benchmark, then holds the store open (or, with hold=False, closes it and waits,
# as a HITL session does between phases) until its stdin closes
LIVE = """
import sys
from mk.bench.record import create_bench
from mk.store import Store
s = Store.open({db!r})
run, bench = s.create_run(None, "auto", {{"target": "cpu"}}), create_bench(s, "jaxbench", "cpu", "ci", ["auto"], "x", {{}})
if not {hold}:
    s.close()
print(run, bench, flush=True)
sys.stdin.read()
"""


def _py(code: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    return p.stdout.split()


def _mk(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "mk", *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "250"})
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def _live(db, hold: bool) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen([sys.executable, "-c", LIVE.format(db=str(db), hold=hold)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    run, bench = proc.stdout.readline().split()
    return proc, run, bench


def _stored(db, table: str, ident: str) -> str:
    with Store.open(db, read_only=True) as store:
        return store.query(f"SELECT status FROM {table} WHERE id = ?", [ident])[0]["status"]


def test_sigkilled_run_and_bench_show_killed_with_their_resume_commands(tmp_path):
    db = tmp_path / "k.duckdb"
    (run,) = _py(KILLED_RUN.format(db=str(db), mode="auto"))
    (bench,) = _py(KILLED_BENCH.format(db=str(db)))
    (rows,) = [json.loads(_mk("runs", "--db", str(db), "--json").stdout)]
    (r,) = rows
    assert r["id"] == run and r["status"] == "killed" and r["stored_status"] == "running"
    assert r["reason"].endswith(f"continue it with: mk resume {run} --db {db}") and "is gone" in r["reason"]
    text = _mk("runs", "--db", str(db)).stdout
    assert run[:12] in text and "killed" in text and "running" not in text
    shown = _mk("show", run[:8], "--db", str(db)).stdout
    assert f"run {run} (auto, task ?): killed" in shown and f"mk resume {run} --db {db}" in " ".join(shown.split())
    info = json.loads(_mk("show", run, "--db", str(db), "--json").stdout)
    assert info["run"]["status"] == "killed" and info["run"]["stored_status"] == "running"
    (b,) = json.loads(_mk("bench", "--list", "--db", str(db), "--json").stdout)
    assert b["id"] == bench and b["status"] == "killed" and b["resume"] == f"mk bench --resume {bench} --db {db}"
    assert "killed" in _mk("bench", "--list", "--db", str(db)).stdout
    # a read command never writes: the rows still say running, until a resume continues them
    assert _stored(db, "runs", run) == "running" and _stored(db, "bench_runs", bench) == "running"


def test_a_live_writer_stays_running_and_a_killed_one_is_told_apart_while_the_store_is_held(tmp_path):
    db = tmp_path / "k.duckdb"
    (dead_run,) = _py(KILLED_RUN.format(db=str(db), mode="search"))
    (dead_bench,) = _py(KILLED_BENCH.format(db=str(db)))
    proc, run, bench = _live(db, hold=True)
    try:
        listed = subprocess.run([sys.executable, "-m", "mk", "runs", "--db", str(db), "--json"], capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0 and "in use by another mk process" in listed.stderr, listed.stderr[-2000:]
        status = {r["id"]: r["status"] for r in json.loads(listed.stdout)}
        assert status == {dead_run: "killed", run: "running"}
        shown = _mk("show", dead_run[:10], "--db", str(db)).stdout
        assert ": killed;" in shown and f"mk resume {dead_run} --db {db}" in " ".join(shown.split())
        assert ": running;" in _mk("show", run[:10], "--db", str(db)).stdout
        listed = subprocess.run([sys.executable, "-m", "mk", "bench", "--list", "--db", str(db), "--json"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "progress files" in listed.stderr, listed.stderr[-2000:]
        status = {r["id"]: r["status"] for r in json.loads(listed.stdout)}
        assert status == {dead_bench: "killed", bench: "running"}
    finally:
        proc.communicate("", timeout=60)


def test_a_writer_that_closed_the_store_but_lives_is_running_until_it_dies(tmp_path):
    db = tmp_path / "k.duckdb"
    proc, run, bench = _live(db, hold=False)  # a HITL session waiting for its user: the store is free
    try:
        (r,) = json.loads(_mk("runs", "--db", str(db), "--json").stdout)
        assert r["status"] == "running"
        (b,) = json.loads(_mk("bench", "--list", "--db", str(db), "--json").stdout)
        assert b["status"] == "running"
    finally:
        proc.kill()
        proc.wait(timeout=60)
    (r,) = json.loads(_mk("runs", "--db", str(db), "--json").stdout)
    assert r["status"] == "killed" and f"pid {proc.pid} on {socket.gethostname()}" in r["reason"]


def test_liveness_rules():
    me = writer_fields()
    assert writer_state(me) == "alive" and shown_status("running", me, store_readable=True) == "running"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.1)
        theirs = {"writer_pid": child.pid, "writer_host": socket.gethostname()}
        assert writer_state(theirs) == "alive"
        if me["writer_start"] is not None:  # Linux: a pid now held by another process is not the writer
            assert writer_state({**theirs, "writer_start": "1"}) == "gone"
        # another machine's pid is never tested here: the store's lock decides
        elsewhere = {"writer_pid": child.pid, "writer_host": socket.gethostname() + "-other"}
        assert writer_state(elsewhere) == "unknown"
        assert shown_status("running", elsewhere, store_readable=False) == "running"
        assert shown_status("running", elsewhere, store_readable=True) == "killed"
    finally:
        child.kill()
        child.wait()
    assert writer_state(theirs) == "gone" and shown_status("running", theirs, store_readable=False) == "killed"
    assert shown_status("interrupted", theirs, store_readable=True) == "interrupted"
    assert shown_status("running", None, store_readable=False) == "running"
