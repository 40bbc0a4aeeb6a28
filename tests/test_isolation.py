"""OS isolation of the tracer (mk.harness.isolation): each property checked by running small programs inside."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from mk.harness import isolation

NAMESPACE_KINDS = ("bwrap", "unshare")


@pytest.fixture(params=NAMESPACE_KINDS)
def iso(request) -> isolation.Isolation:
    got = isolation.detect(request.param)
    if got.kind != request.param:
        pytest.skip(f"{request.param} isolation does not work here ({'; '.join(got.notes) or got.description})")
    return got


@pytest.fixture
def workdir(tmp_path) -> Path:
    work = tmp_path / "work"
    for sub in ("home", "tmp"):
        (work / sub).mkdir(parents=True)
    return work


def _env(work: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JAX_PLATFORMS": "cpu", "HOME": str(work / "home"),
            "TMPDIR": str(work / "tmp"), "PYTHONDONTWRITEBYTECODE": "1"}


def _popen(iso: isolation.Isolation, code: str, work: Path, *args: str, keep_fds=(), **kw) -> subprocess.Popen:
    argv = [sys.executable, "-I", "-c", textwrap.dedent(code), *args]
    return subprocess.Popen(iso.wrap(argv, work, keep_fds=keep_fds), cwd=work, env=_env(work), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=tuple(keep_fds),
                            start_new_session=True, **kw)


def _run(iso, code, work, *args, keep_fds=(), timeout=60, **kw) -> subprocess.CompletedProcess:
    proc = _popen(iso, code, work, *args, keep_fds=keep_fds, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def _json(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _read_until_eof(fd: int, timeout_s: float) -> tuple[bytes, bool]:
    """Everything readable from ``fd`` until every writer is gone (True) or ``timeout_s`` passes (False)."""
    data, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return data, True
            data += chunk
    return data, False


def _host_cmdlines_containing(marker: bytes) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


# --- (1) nothing outlives the run -------------------------------------------------------------------------
DAEMON = """
import os, sys
alive = int(sys.argv[1]); marker = sys.argv[2]
sync_r, sync_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:                        # a classic daemon: setsid + double fork, then exec
        os.write(alive, b"up"); os.write(sync_w, b"x")
        os.set_inheritable(alive, True)
        os.execv("/usr/bin/sleep", ["sleep", marker])
    os._exit(0)
os.read(sync_r, 1)                            # the daemon is running; now leave it behind
print("main exits")
"""


def test_a_daemonized_grandchild_dies_with_the_run(iso, workdir):
    marker = f"61.{uuid.uuid4().int % 10**6:06d}"
    r, w = os.pipe()
    try:
        result = _run(iso, DAEMON, workdir, str(w), marker, keep_fds=(w,), timeout=30)
        os.close(w)
        w = -1
        assert result.returncode == 0, result.stderr
        data, eof = _read_until_eof(r, 10)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert data == b"up", "the daemon never started"
    assert eof, "a setsid'd daemon still holds its pipe after the run ended"
    assert _host_cmdlines_containing(marker.encode()) == []


def test_killing_the_wrapper_kills_the_whole_tree(iso, workdir):
    marker = f"62.{uuid.uuid4().int % 10**6:06d}"
    code = """
    import os, sys
    alive = int(sys.argv[1])
    if os.fork() == 0:
        os.setsid(); os.write(alive, b"up"); os.execv("/usr/bin/sleep", ["sleep", sys.argv[2]])
    os.execv("/usr/bin/sleep", ["sleep", sys.argv[2]])
    """
    r, w = os.pipe()
    try:
        proc = _popen(iso, code, workdir, str(w), marker, keep_fds=(w,))
        os.close(w)
        w = -1
        assert os.read(r, 2) == b"up"
        proc.kill()  # only the wrapper process itself, as a judge that lost track of the group would
        proc.wait(timeout=10)
        _, eof = _read_until_eof(r, 10)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert eof, "processes inside survived the wrapper"
    assert _host_cmdlines_containing(marker.encode()) == []


# --- (2) the file system ------------------------------------------------------------------------------------
WRITES = """
import json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "a") as f:
            f.write("candidate was here")
        out[path] = "written"
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
"""


def test_only_the_work_dir_is_writable(iso, workdir):
    tag = uuid.uuid4().hex[:8]
    repo = Path(isolation.__file__).resolve().parents[2]
    outside = [repo / f"should_not_exist_{tag}", repo / "mk" / f"should_not_exist_{tag}", Path.home() / f"x_{tag}",
               Path(sys.prefix) / f"x_{tag}", Path("/etc") / f"x_{tag}", Path("/usr") / f"x_{tag}", Path(f"/x_{tag}")]
    host_tmp = Path("/tmp") / f"mk_isolation_{tag}"
    inside = workdir / "inside.txt"
    got = _json(_run(iso, WRITES, workdir, *map(str, outside), str(host_tmp), str(inside), "/etc/passwd"))
    for path in outside:
        # under /tmp (a checkout there) the path lies in the sandbox's private tmpfs: writable inside, never on the host
        if not path.is_relative_to("/tmp"):
            assert got[str(path)] != "written", path
        assert not path.exists(), path
    assert not host_tmp.exists()  # /tmp inside is a private tmpfs (writable there, gone afterwards)
    assert got["/etc/passwd"] != "written"
    assert got[str(inside)] == "written" and inside.read_text() == "candidate was here"


def test_host_files_outside_the_view_are_invisible(iso, workdir, tmp_path):
    secret = tmp_path / "other-run" / "reference.export"  # a sibling work dir of another run
    secret.parent.mkdir()
    secret.write_text("the answer")
    repo = Path(isolation.__file__).resolve().parents[2]
    code = """
    import json, os, sys
    out = {}
    for p in sys.argv[1:]:
        try:
            with open(p) as f:
                out[p] = f.read(20)
        except OSError as exc:
            out[p] = type(exc).__name__
    print(json.dumps(out))
    """
    targets = [str(secret), str(repo / "pyproject.toml"), str(Path.home() / ".bashrc"), "/etc/shadow"]
    got = _json(_run(iso, code, workdir, *targets))
    assert all(v in ("FileNotFoundError", "PermissionError") for v in got.values()), got


# --- (3) the network ------------------------------------------------------------------------------------------
def test_no_network(iso, workdir):
    code = """
    import json, socket
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1).close(); connected = True
    except OSError:
        connected = False
    print(json.dumps({"connected": connected, "interfaces": [n for _, n in socket.if_nameindex()]}))
    """
    got = _json(_run(iso, code, workdir))
    assert got["connected"] is False
    assert set(got["interfaces"]) <= {"lo"}, got


# --- (4) processes ------------------------------------------------------------------------------------------------
def test_proc_shows_only_the_sandbox(iso, workdir):
    code = """
    import json, os, sys
    judge = sys.argv[1]
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    try:
        with open("/proc/%s/cmdline" % judge, "rb") as f:
            cmdline = f.read().decode(errors="replace")
    except OSError as exc:
        cmdline = type(exc).__name__
    print(json.dumps({"pids": pids, "me": os.getpid(), "judge_cmdline": cmdline}))
    """
    judge = os.getpid()
    got = _json(_run(iso, code, workdir, str(judge)))
    assert got["me"] <= 3 and len(got["pids"]) <= 4, got
    if judge > 10:
        assert judge not in got["pids"]
    with open(f"/proc/{judge}/cmdline", "rb") as f:
        mine = f.read().decode(errors="replace")
    assert got["judge_cmdline"] != mine and "pytest" not in got["judge_cmdline"]


def test_no_capabilities_and_no_nested_user_namespaces(iso, workdir):
    code = """
    import ctypes, json, os
    caps = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status") if l.startswith(("Cap", "NoNewPrivs"))}
    nested = ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0
    try:
        open("/proc/sys/kernel/hostname", "w").close(); sysctl = "writable"
    except OSError as exc:
        sysctl = type(exc).__name__
    print(json.dumps({"caps": caps, "nested_userns": nested, "sysctl": sysctl, "uid": os.getuid()}))
    """
    got = _json(_run(iso, code, workdir))
    assert got["caps"]["CapEff"] == "0000000000000000" and got["caps"]["CapPrm"] == "0000000000000000", got
    assert got["caps"]["NoNewPrivs"] == "1"
    assert got["nested_userns"] is False
    assert got["sysctl"] != "writable"


# --- (5) file descriptors ----------------------------------------------------------------------------------------
FDS = """
import json, os, sys
secret_fd, kept_fd = int(sys.argv[1]), int(sys.argv[2])
try:
    os.fstat(secret_fd); secret = "open"
except OSError:
    secret = "closed"
os.write(kept_fd, b"through the kept fd")
def is_open(fd):
    try:
        os.fstat(fd); return True
    except OSError:
        return False
listed = [int(f) for f in os.listdir("/proc/self/fd")]  # listdir's own descriptor is closed again below
print(json.dumps({"secret": secret, "fds": sorted(f for f in listed if is_open(f))}))
"""


def test_only_kept_descriptors_reach_the_sandbox(iso, workdir, tmp_path):
    secret = open(tmp_path / "judge-secret.txt", "w")
    r, w = os.pipe()
    try:
        got = _json(_run(iso, FDS, workdir, str(secret.fileno()), str(w), keep_fds=(w,)))
        kept = w
        os.close(w)
        w = -1
        data, _ = _read_until_eof(r, 5)
    finally:
        secret.close()
        os.close(r)
        if w >= 0:
            os.close(w)
    assert got["secret"] == "closed"
    assert data == b"through the kept fd"
    assert got["fds"] == [0, 1, 2, kept]


def test_unshare_closes_stray_descriptors_itself(workdir, tmp_path):
    iso = isolation.detect("unshare")
    if iso.kind != "unshare":
        pytest.skip(f"unshare isolation does not work here ({'; '.join(iso.notes)})")
    secret = open(tmp_path / "judge-secret.txt", "w")
    os.set_inheritable(secret.fileno(), True)
    r, w = os.pipe()
    os.set_inheritable(w, True)
    argv = iso.wrap([sys.executable, "-I", "-c", FDS, str(secret.fileno()), str(w)], workdir, keep_fds=(w,))
    try:  # close_fds=False: even a careless caller leaks nothing but keep_fds past the prologue
        done = subprocess.run(argv, cwd=workdir, env=_env(workdir), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, close_fds=False, timeout=60)
        got = _json(done)
    finally:
        secret.close()
        os.close(r)
        os.close(w)
    assert got["secret"] == "closed"


# --- exit status ---------------------------------------------------------------------------------------------------
def test_exit_status_passes_through(iso, workdir):
    assert _run(iso, "import sys; sys.exit(3)", workdir).returncode == 3
    assert _run(iso, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", workdir).returncode in (128 + 9, -9)


# --- (6) JAX works inside -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_jax_runs_inside(iso, workdir):
    code = """
    import json, jax, jax.numpy as jnp
    print(json.dumps({"sum": float(jnp.ones(3).sum()), "devices": [d.platform for d in jax.devices()]}))
    """
    got = _json(_run(iso, code, workdir, timeout=120))
    assert got == {"sum": 3.0, "devices": ["cpu"]}


# --- detection ---------------------------------------------------------------------------------------------------
def test_mk_isolation_none_forces_no_isolation(monkeypatch, workdir):
    monkeypatch.setenv("MK_ISOLATION", "none")
    got = isolation.detect()
    assert got.kind == "none" and "no OS isolation" in got.description
    argv = [sys.executable, "-I", "-m", "mk.harness.tracer", str(workdir)]
    assert got.wrap(argv, workdir) == argv


def test_detect_is_cached_and_never_crashes(monkeypatch):
    monkeypatch.delenv("MK_ISOLATION", raising=False)
    first = isolation.detect()
    assert isolation.detect() is first
    assert first.kind in isolation.KINDS and first.description
    monkeypatch.setenv("MK_ISOLATION", "sandcastle")  # unknown: probed automatically, with a warning
    assert isolation.detect() is first


@pytest.fixture
def fresh_cache():
    isolation._detect.cache_clear()
    yield
    isolation._detect.cache_clear()


def test_detect_falls_back_when_a_kind_is_missing_or_fails(monkeypatch, fresh_cache):
    real_which = isolation.shutil.which
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    got = isolation.detect("bwrap")
    assert got.kind in ("unshare", "none")
    assert any(n.startswith("bwrap: not installed") for n in got.notes)
    isolation._detect.cache_clear()
    monkeypatch.setattr(isolation, "_probe", lambda iso: "probe says no")
    got = isolation.detect("auto")
    assert got.kind == "none"
    assert all("probe says no" in n or "not installed" in n or "Linux" in n for n in got.notes)


def test_wrap_refuses_the_root_as_work_dir(iso):
    with pytest.raises(ValueError):
        iso.wrap(["true"], Path("/"))


def test_extra_read_only_paths_and_devices(iso, workdir, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("shared")
    code = """
    import json, os, sys
    try:
        open(os.path.join(sys.argv[1], "new.txt"), "w").close(); writable = True
    except OSError:
        writable = False
    print(json.dumps({"read": open(os.path.join(sys.argv[1], "data.txt")).read(), "writable": writable,
                      "sys": os.path.isdir("/sys/devices")}))
    """
    argv = [sys.executable, "-I", "-c", textwrap.dedent(code), str(shared)]
    done = subprocess.run(iso.wrap(argv, workdir, extra_ro=[shared], devices=True), cwd=workdir, env=_env(workdir),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert _json(done) == {"read": "shared", "writable": False, "sys": True}
    assert not (shared / "new.txt").exists()
    plain = _json(_run(iso, "import json, os; print(json.dumps(os.path.exists('/sys/devices')))", workdir))
    assert plain is False  # without devices=True there is no /sys at all
