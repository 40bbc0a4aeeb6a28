"""Child processes of the judge: spawn, ask, supervise, kill.

Both the tracer (untrusted: it imports candidate code, inside OS isolation)
and the runner (trusted code that executes exported programs) are
:class:`Child` processes. The judge sends one JSON request per line on a
pipe and reads one JSON reply per line on another; stdout and stderr go to a
log file whose tail is kept for the verdict (never parsed). Each request has
its own deadline; the resident memory of the child's whole process tree is
watched; on a deadline, memory exhaustion or a crash the tree is killed and
the outcome is a :class:`ChildFailed` value, never a hang in the judge.

The environment is scrubbed (no API keys; ``HOME``/``TMPDIR`` inside the work
dir), core dumps are off and ``RLIMIT_DATA`` caps the heap.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

log = logging.getLogger(__name__)

#: environment variables a child may inherit (everything else, API keys included, is dropped)
_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "JAX_PLATFORMS", "JAX_ENABLE_X64", "XLA_FLAGS", "LD_LIBRARY_PATH",
              "CUDA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID")
MAX_REPLY = 1 << 20
#: the largest file a child may write (exported programs, outputs, its log): RLIMIT_FSIZE, set by the child itself
FILE_LIMIT_MB = 1024

Outcome = Literal["failed", "rejected", "timeout", "crashed"]


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed per phase; ``case_s`` applies to each correctness case (scaled with the kernel's grid
    for interpreted runs)."""

    import_s: float = 60.0
    compile_s: float = 90.0
    case_s: float = 60.0
    cost_s: float = 60.0
    timing_s: float = 120.0

    def for_phase(self, phase: str) -> float:
        return float(getattr(self, f"{phase}_s"))


class ChildFailed(Exception):
    """How a child ended a request other than with a reply: ``outcome`` and a one-line ``message``."""

    def __init__(self, outcome: Outcome, message: str, *, log_tail: str = ""):
        super().__init__(message)
        self.outcome, self.message, self.log_tail = outcome, message, log_tail


@dataclass
class Child:
    """A supervised child process speaking JSON lines."""

    argv: Sequence[str]
    workdir: Path
    memory_limit_mb: int
    env: Mapping[str, str] = field(default_factory=dict)
    poll_s: float = 0.02
    #: turns the command line into the isolated one, given the pipe fds the child must keep
    wrapper: Callable[[list[str], Path, tuple[int, ...]], list[str]] | None = None
    proc: subprocess.Popen | None = None
    peak_rss_mb: float = 0.0

    def start(self) -> "Child":
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        # the log lives beside the work dir, not in it (a candidate owns its work dir); RLIMIT_FSIZE caps it
        self._log_path = self.workdir.parent / f"{self.workdir.name}.log"
        env = {k: os.environ[k] for k in _ENV_ALLOW if k in os.environ}
        env.update(HOME=str(self.workdir / "home"), TMPDIR=str(self.workdir / "tmp"), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1", MK_REQUEST_FD=str(req_r), MK_REPLY_FD=str(rep_w))
        env.update(self.env)
        for sub in ("home", "tmp"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        env["MK_MEMORY_LIMIT_MB"] = str(self.memory_limit_mb)  # the child caps itself before any candidate code
        env["MK_FILE_LIMIT_MB"] = str(FILE_LIMIT_MB)
        argv = self.wrapper(list(self.argv), self.workdir, (req_r, rep_w)) if self.wrapper else list(self.argv)
        with open(self._log_path, "wb") as err:
            self.proc = subprocess.Popen(argv, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=err,
                                         stderr=err, pass_fds=(req_r, rep_w), start_new_session=True)
        os.close(req_r)
        os.close(rep_w)
        self._buf = b""
        return self

    def ask(self, request: Mapping[str, Any], timeout_s: float, what: str) -> dict[str, Any]:
        """Send ``request`` and wait for its reply; ``what`` names the phase in messages."""
        assert self.proc is not None, "start() first"
        try:
            os.write(self._req_w, (json.dumps(request) + "\n").encode())
        except OSError:
            self._fail("crashed", self._exit_message(what))
        deadline = time.monotonic() + timeout_s
        while True:
            if b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except (ValueError, UnicodeDecodeError):
                    self._fail("crashed", f"the {self.name} sent an unreadable reply during {what}")
                if not isinstance(reply, dict):
                    self._fail("crashed", f"the {self.name} sent an unreadable reply during {what}")
                return reply
            ready, _, _ = select.select([self._rep_r], [], [], self.poll_s)
            if ready:
                data = os.read(self._rep_r, 65536)
                if data:
                    self._buf += data
                    if len(self._buf) > MAX_REPLY:
                        self._fail("crashed", f"the {self.name} sent an oversized reply during {what}")
                    continue
                self._wait_exit()
                self._fail("crashed", self._exit_message(what))
            rss = tree_rss_mb(self.proc.pid)
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            if rss > self.memory_limit_mb:
                self._fail("crashed", f"memory limit exceeded during {what}: resident {rss:.0f} MB > {self.memory_limit_mb} MB")
            if time.monotonic() > deadline:
                self._fail("timeout", f"{what} ran past its {timeout_s:.0f} s limit")
            if self.proc.poll() is not None and not _pending(self._rep_r):
                self._fail("crashed", self._exit_message(what))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and getattr(self, "_req_w", None) is not None

    @property
    def name(self) -> str:
        argv = " ".join(self.argv)
        return "tracer" if "tracer" in argv else "compile worker" if "harness.compiler" in argv else "runner"

    def log_tail(self, limit: int = 2000) -> str:
        try:
            with open(self._log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
                data = f.read(limit)
        except (OSError, AttributeError):
            return ""
        return data.decode("utf-8", "replace").strip()

    def remove(self) -> None:
        """Delete the work dir and the log, whatever the candidate left there (deep trees, odd permissions)."""
        remove_tree(self.workdir)
        try:
            self._log_path.unlink()
        except (OSError, AttributeError):
            pass

    def close(self) -> None:
        if self.proc is None:
            return
        for fd in (getattr(self, "_req_w", None), getattr(self, "_rep_r", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._req_w = self._rep_r = None
        kill_tree(self.proc)

    def _wait_exit(self) -> None:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass

    def _exit_message(self, what: str) -> str:
        rc = self.proc.poll() if self.proc else None
        if rc is None:
            return f"the {self.name} closed its reply channel during {what}"
        if rc < 0 or rc > 128:  # a wrapper (bwrap, unshare) reports a signal as 128 + its number
            try:
                name = signal.Signals(-rc if rc < 0 else rc - 128).name
            except ValueError:
                name = f"signal {abs(rc) % 128}"
            if name == "SIGXFSZ":
                return (f"the {self.name} was killed during {what}: it wrote a file past the {FILE_LIMIT_MB} MB limit "
                        "(its log, an output or a program)")
            return f"the {self.name} was killed by {name} during {what}"
        return f"the {self.name} exited with code {rc} during {what} (the candidate ended the process, or a fatal error)"

    def _fail(self, outcome: Outcome, message: str) -> None:
        tail = self.log_tail()
        self.close()
        raise ChildFailed(outcome, message, log_tail=tail)


def remove_tree(path: Path) -> None:
    """``shutil.rmtree`` that survives what a hostile process leaves behind (a tree deeper than the recursion
    limit, files it made read-only): falls back to ``rm -rf``."""
    import shutil

    try:
        shutil.rmtree(path, ignore_errors=True)
    except (RecursionError, OSError):
        pass
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, in MB."""
    total, seen, todo = 0.0, set(), [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_mb(p)
        todo.extend(_children(p))
    return total


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _pending(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


def kill_tree(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("child %d did not exit after SIGKILL", proc.pid)


def default_memory_limit_mb() -> int:
    """Half the machine's memory, at most 16 GiB."""
    try:
        with open("/proc/meminfo") as f:
            total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        return int(min(16384, total_kb // 1024 // 2))
    except (OSError, StopIteration, ValueError):
        return 8192


def serve(handlers: Mapping[str, Any]) -> None:
    """The child's side: read requests from ``MK_REQUEST_FD``, answer on ``MK_REPLY_FD`` with
    ``handlers[request["op"]](request)`` (a dict); an exception becomes ``{"error": ...}``. Ends on EOF."""
    limit = int(os.environ.get("MK_MEMORY_LIMIT_MB", "0")) * 1024 * 1024
    fsize = int(os.environ.get("MK_FILE_LIMIT_MB", "0")) * 1024 * 1024
    for which, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_DATA, limit), (resource.RLIMIT_FSIZE, fsize)):
        if value or which == resource.RLIMIT_CORE:  # soft and hard: the candidate cannot raise them again
            try:
                resource.setrlimit(which, (value, value))
            except (OSError, ValueError):
                pass
    req = os.fdopen(int(os.environ["MK_REQUEST_FD"]), "rb", buffering=0)
    rep_fd = int(os.environ["MK_REPLY_FD"])
    buf = b""
    while True:
        chunk = req.read(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            request = json.loads(line)
            try:
                reply = handlers[request["op"]](request)
            except BaseException as exc:  # noqa: BLE001 - reported to the judge as data
                reply = {"error": f"{type(exc).__name__}: {exc}", "error_type": type(exc).__name__,
                         "traceback_tail": _traceback_tail(exc)}
            data = (json.dumps(reply) + "\n").encode()
            while data:
                data = data[os.write(rep_fd, data):]
            sys.stdout.flush()


def _traceback_tail(exc: BaseException, lines: int = 6) -> str:
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.strip().splitlines()[-lines:])[-1500:]
