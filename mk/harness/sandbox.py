"""The judge's side of the sandbox: prepare a work dir, spawn the worker, supervise it.

The worker (:mod:`mk.harness.worker`) runs in its own process group with a
scrubbed environment (no API keys; ``HOME`` and ``TMPDIR`` inside its fresh
work dir), no core dumps, a data-segment limit (``RLIMIT_DATA``: unlike
``RLIMIT_AS`` it leaves XLA's address-space reservations alone) and a resident
memory watchdog. Every phase has its own deadline; on a deadline, on memory
exhaustion or on a crash the process group is killed and the outcome is data
(:class:`WorkerRun`), never an exception in the judge (rule 9).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from mk.harness.worker import CANDIDATE_FILE, OUT_DIR, REFERENCE_FILE, SPEC_FILE, save_arrays

log = logging.getLogger(__name__)

PHASES = ("import", "compile", "case", "cost", "timing")
_KINDS = ("BEGIN", "OK", "FAIL", "REJECT", "END")
#: environment variables a worker may inherit (everything else, API keys included, is dropped)
_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "JAX_PLATFORMS", "JAX_ENABLE_X64", "XLA_FLAGS", "LD_LIBRARY_PATH",
              "CUDA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID")

Outcome = Literal["finished", "failed", "rejected", "timeout", "crashed", "stopped"]


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed per phase; ``case_s`` applies to each correctness case."""

    import_s: float = 60.0
    compile_s: float = 60.0
    case_s: float = 30.0
    cost_s: float = 30.0
    timing_s: float = 120.0

    def for_phase(self, phase: str) -> float:
        return float(getattr(self, f"{phase}_s"))


@dataclass
class WorkerRun:
    """How the worker process ended, as the judge saw it."""

    outcome: Outcome
    phase: str = "import"
    index: int = 0
    message: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    stderr_tail: str = ""


def default_memory_limit_mb() -> int:
    """Half the machine's memory, at most 16 GiB."""
    try:
        with open("/proc/meminfo") as f:
            total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        return int(min(16384, total_kb // 1024 // 2))
    except (OSError, StopIteration, ValueError):
        return 8192


def prepare_workdir(
    source: str, spec: dict[str, Any], case_inputs: Sequence[Sequence[np.ndarray]], reference: bytes | None,
    extra_inputs: Mapping[str, Sequence[np.ndarray]] | None = None,
) -> Path:
    """A fresh directory holding only what the worker needs: source, spec, inputs, reference artifact.
    ``extra_inputs`` maps further dir names (timing-only input sets) to arrays."""
    root = Path(tempfile.mkdtemp(prefix="mk-sandbox-"))
    (root / CANDIDATE_FILE).write_text(source, encoding="utf-8")
    for case, inputs in zip(spec["cases"], case_inputs):
        save_arrays(root / case["dir"], "in", list(inputs))
    for name, inputs in (extra_inputs or {}).items():
        save_arrays(root / name, "in", list(inputs))
    if reference is not None:
        (root / REFERENCE_FILE).write_bytes(reference)
    (root / OUT_DIR).mkdir()
    (root / "home").mkdir()
    (root / "tmp").mkdir()
    (root / SPEC_FILE).write_text(json.dumps(spec))
    return root


def remove_workdir(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


class Sandbox:
    """Runs the worker over a prepared work dir and supervises it phase by phase."""

    def __init__(self, workdir: Path, *, timeouts: Timeouts | None = None, memory_limit_mb: int | None = None,
                 env: Mapping[str, str] | None = None, poll_s: float = 0.05):
        self.workdir = workdir
        self.extra_env = dict(env or {})
        self.timeouts = timeouts or Timeouts()
        self.memory_limit_mb = int(memory_limit_mb or default_memory_limit_mb())
        self.poll_s = poll_s

    def _env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in _ENV_ALLOW if k in os.environ}
        env.update(HOME=str(self.workdir / "home"), TMPDIR=str(self.workdir / "tmp"), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1")
        env.update(self.extra_env)
        return env

    def run(self, on_case_done: Callable[[int], bool] | None = None) -> WorkerRun:
        """Run the worker to the end. ``on_case_done(i)`` is called when case ``i`` has been written;
        returning False stops the worker early (outcome ``stopped``)."""
        rfd, wfd = os.pipe()
        spec_path = self.workdir / SPEC_FILE
        spec = json.loads(spec_path.read_text())
        spec["progress_fd"] = wfd
        spec_path.write_text(json.dumps(spec))
        err_dir = Path(tempfile.mkdtemp(prefix="mk-worker-log-"))
        err_path = err_dir / "stderr.txt"
        start = time.monotonic()
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "mk.harness.worker", str(self.workdir)],
                cwd=self.workdir, env=self._env(), stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                pass_fds=(wfd,), start_new_session=True,
            )
        os.close(wfd)
        self._limit(proc.pid)
        try:
            result = self._supervise(proc, rfd, on_case_done or (lambda i: True), start)
        finally:
            os.close(rfd)
            _kill_group(proc)
            result_tail = _tail(err_path)
            shutil.rmtree(err_dir, ignore_errors=True)
        result.stderr_tail = result_tail
        result.wall_s = time.monotonic() - start
        return result

    def _limit(self, pid: int) -> None:
        limit = self.memory_limit_mb * 1024 * 1024
        for which, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_DATA, limit)):
            try:
                resource.prlimit(pid, which, (value, value))
            except (OSError, ValueError) as exc:  # the process may already be gone; the watchdog still applies
                log.debug("prlimit(%s) failed: %s", which, exc)

    def _supervise(self, proc: subprocess.Popen, rfd: int, on_case_done: Callable[[int], bool], start: float) -> WorkerRun:
        run = WorkerRun("crashed")
        deadline = start + self.timeouts.import_s
        began = start
        buf = b""
        eof = False
        while True:
            ready, _, _ = select.select([rfd], [], [], self.poll_s)
            if ready:
                data = os.read(rfd, 65536)
                if not data:  # every writer closed: the worker is ending; let poll() see it
                    eof = True
                    time.sleep(self.poll_s)
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = _parse(line)
                    if msg is None:
                        run.outcome, run.message = "crashed", f"the worker's progress channel carried an invalid message during {run.phase}"
                        return run
                    kind, phase, index, payload = msg
                    if kind == "BEGIN":
                        run.phase, run.index, began = phase, index, time.monotonic()
                        deadline = began + self.timeouts.for_phase(phase)
                    elif kind == "OK":
                        run.seconds[f"{phase}_{index}" if phase == "case" else phase] = float(payload)
                        if phase == "case" and not on_case_done(index):
                            run.outcome, run.phase, run.index = "stopped", phase, index
                            return run
                    elif kind in ("FAIL", "REJECT"):
                        run.outcome = "failed" if kind == "FAIL" else "rejected"
                        run.phase, run.index, run.message = phase, index, payload
                        return run
                    else:  # END
                        run.outcome = "finished"
                        return run
            now = time.monotonic()
            rss = _rss_mb(proc.pid)
            run.peak_rss_mb = max(run.peak_rss_mb, rss)
            if rss > self.memory_limit_mb:
                run.outcome = "crashed"
                run.message = f"memory limit exceeded in phase {_where(run)}: resident {rss:.0f} MB > {self.memory_limit_mb} MB"
                return run
            if now > deadline:
                run.outcome = "timeout"
                run.message = f"phase {_where(run)} ran past its {self.timeouts.for_phase(run.phase):.0f} s limit"
                return run
            rc = proc.poll()
            if rc is not None and (eof or not _pending(rfd)):
                run.outcome, run.message = "crashed", _describe_exit(rc, run)
                return run


def _parse(line: bytes) -> tuple[str, str, int, str] | None:
    try:
        parts = line.decode("ascii").split(" ", 3)
    except UnicodeDecodeError:
        return None
    if parts == ["END"]:
        return "END", "", 0, ""
    if len(parts) < 3 or parts[0] not in _KINDS or parts[1] not in PHASES or not parts[2].isdigit():
        return None
    kind, phase, index = parts[0], parts[1], int(parts[2])
    payload = parts[3] if len(parts) == 4 else ""
    try:
        if kind == "OK":
            payload = str(float(payload))
        elif kind in ("FAIL", "REJECT"):
            payload = json.loads(payload)
            if not isinstance(payload, str):
                return None
    except (ValueError, json.JSONDecodeError):
        return None
    return kind, phase, index, payload


def _pending(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


def _where(run: WorkerRun) -> str:
    return f"case {run.index}" if run.phase == "case" else run.phase


def _describe_exit(rc: int, run: WorkerRun) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"the worker was killed by {name} during {_where(run)}"
    return (
        f"the worker exited with code {rc} during {_where(run)} without finishing "
        "(the candidate ended the process: os._exit, sys.exit or a fatal error)"
    )


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("worker %d did not exit after SIGKILL", proc.pid)


def _tail(path: Path, limit: int = 800) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()
