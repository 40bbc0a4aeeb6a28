"""Runtime sandbox policy for the worker process (EVAL-INTEGRITY rules 7, 8, 9).

The static check (:mod:`mk.harness.static`) rejects the sources it can see
through; this audit hook (:pep:`578`) is the second line, for what a library
does on a candidate's behalf at run time (``typing.get_type_hints`` evaluating
a string, say). Installed in the worker after ``import jax`` and before the
candidate is imported, it denies:

- ``open`` outside the allowed directories: reads are also allowed under the
  Python standard library, site-packages and mk's own package (what JAX and
  the import system read), ``/dev/null`` and ``/dev/urandom``; writes only
  inside ``allowed_dirs``;
- directory listings outside the readable roots;
- sockets, ``subprocess``, ``os.system``, ``os.exec*``, ``os.fork``,
  ``os.spawn``/``posix_spawn``, ``ctypes`` (no new native libraries),
  ``resource.setrlimit`` (the memory limit stays), signals to other processes;
- removing, renaming, linking, chmod-ing or creating paths outside
  ``allowed_dirs``.

A denied event raises ``PermissionError("mk sandbox: ... is not allowed")``
and is remembered (:func:`denied_events`) so the worker can report it even if
a candidate swallows the error. Adding further audit hooks is harmless: hooks
cannot be removed, so ours always runs.

What JAX needs after import was measured with a jitted computation and a
Pallas interpret-mode kernel: only reads under site-packages and the stdlib
(lazy imports), no writes, no sockets, no subprocesses, no ``ctypes``.
"""

from __future__ import annotations

import logging
import os
import site
import sys
import sysconfig
import threading
from typing import Any, Sequence

__all__ = ["install_sandbox_policy", "denied_events", "sandbox_installed"]

log = logging.getLogger(__name__)

_EXACT_DENY = {
    "subprocess.Popen": "starting a subprocess",
    "os.system": "os.system",
    "os.exec": "os.exec*",
    "os.fork": "os.fork",
    "os.forkpty": "os.forkpty",
    "os.posix_spawn": "os.posix_spawn",
    "os.spawn": "os.spawn*",
    "os.startfile": "os.startfile",
    "pty.spawn": "pty.spawn",
    "resource.setrlimit": "changing resource limits",
    "resource.prlimit": "changing resource limits",
    "signal.pthread_kill": "signalling threads",
    "webbrowser.open": "opening a browser",
    "sys.remote_exec": "remote code execution",
}
_PREFIX_DENY = ("socket.", "ctypes.", "urllib.", "http.client.", "ftplib.", "smtplib.", "poplib.", "imaplib.",
                "nntplib.", "telnetlib.")
# events whose first (and for renames, second) argument is a path that must lie in a writable dir
_WRITE_PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1, "os.truncate": 1, "os.utime": 1,
    "os.rename": 2, "os.link": 2, "os.symlink": 2, "os.chflags": 1, "os.lchflags": 1, "os.setxattr": 1,
    "os.removexattr": 1, "shutil.rmtree": 1, "shutil.copyfile": 2, "shutil.copymode": 2, "shutil.copystat": 2,
    "shutil.copytree": 2, "shutil.move": 2, "shutil.chown": 1, "os.mkfifo": 1, "os.mknod": 1,
}
_LIST_EVENTS = ("os.listdir", "os.scandir", "glob.glob", "os.walk")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_READ_OK_FILES = ("/dev/null", "/dev/urandom", "/dev/random")

_state: dict[str, Any] = {"installed": False, "denied": []}


def install_sandbox_policy(allowed_dirs: Sequence[str], *, read_only_dirs: Sequence[str] = ()) -> None:
    """Install the audit hook in this process (once; later calls are ignored).

    ``allowed_dirs``: directories the candidate may read and write (its own
    work dir, the candidate file's dir). ``read_only_dirs``: extra directories
    it may only read. The stdlib, site-packages and mk's package are always
    readable. Irreversible for the life of the process."""
    if _state["installed"]:
        log.debug("sandbox policy already installed; ignoring a second install")
        return
    writable = tuple(_norm(d) for d in allowed_dirs if d)
    readable = writable + tuple(_norm(d) for d in [*read_only_dirs, *_python_dirs()] if d)
    me = os.getpid()
    guard = threading.local()  # the re-entrancy guard lives only in the hook's closure, not on the module
    judge, denied = _judge, _state["denied"]  # bound now: patching the module later changes nothing

    def hook(event: str, args: tuple[Any, ...]) -> None:
        _guard = guard
        if getattr(_guard, "busy", False):
            return
        _guard.busy = True
        try:
            problem = judge(event, args, writable, readable, me)
        finally:
            _guard.busy = False
        if problem is not None:
            msg = f"mk sandbox: {problem} is not allowed"
            denied.append(msg)
            raise PermissionError(msg)

    if writable:
        # tempfile would otherwise look for /tmp, which is outside the sandbox
        import tempfile

        tempfile.tempdir = writable[0]
    sys.addaudithook(hook)
    _state["installed"] = True
    log.debug("sandbox policy installed: writable=%s", writable)


def denied_events() -> tuple[str, ...]:
    """Messages of every event the policy denied in this process, oldest first."""
    return tuple(_state["denied"])


def sandbox_installed() -> bool:
    return bool(_state["installed"])


def _judge(event: str, args: tuple[Any, ...], writable: tuple[str, ...], readable: tuple[str, ...], me: int) -> str | None:
    """None when the event is allowed, else a description of what was attempted."""
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if path is None or isinstance(path, int):
            return None  # an already-open descriptor: it was opened under this policy or before it
        p = _norm(path)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (mode is None and isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if writing:
            return None if _inside(p, writable) else f"writing {p!r} (outside the sandbox's work directories)"
        return None if p in _READ_OK_FILES or _inside(p, readable) else f"reading {p!r} (outside the sandbox)"
    if event in _EXACT_DENY:
        return _EXACT_DENY[event]
    if event.startswith(_PREFIX_DENY):
        return event
    if event in _WRITE_PATH_EVENTS:
        for path in args[: _WRITE_PATH_EVENTS[event]]:
            if isinstance(path, (str, bytes, os.PathLike)) and not _inside(_norm(path), writable):
                return f"{event} of {_norm(path)!r} (outside the sandbox's work directories)"
        return None
    if event in _LIST_EVENTS:
        path = args[0] if args else "."
        if isinstance(path, int):
            return None
        p = _norm(path if path not in (None, b"", "") else ".")
        return None if _inside(p, readable) else f"listing {p!r} (outside the sandbox)"
    if event in ("os.kill", "os.killpg"):
        pid = args[0] if args else None
        return None if pid == me and event == "os.kill" else f"{event} of process {pid}"
    return None


def _norm(path: Any) -> str:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return os.path.realpath(os.fspath(path))


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _python_dirs() -> list[str]:
    """Read-only roots: the stdlib, site-packages, mk's own package (code, not tasks)."""
    dirs = [sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    dirs += list(site.getsitepackages()) + [site.getusersitepackages()]
    dirs += [p for p in sys.path if p and p.endswith(("site-packages", "dist-packages", ".zip", "lib-dynload"))]
    dirs.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../mk
    return dirs
