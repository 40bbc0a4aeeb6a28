"""OS-level isolation for the process that imports and traces candidate code.

Threat model
------------
Candidate code is written by a language model that is rewarded for a good
verdict, so the judge treats it as hostile: it may try to read the task's
reference or the judge's secrets (API keys, other runs' work dirs, the
judge's command line), rewrite the judge's files or results, phone home,
leave a process behind that tampers with later runs, or simply hang or
exhaust the machine. The tracer (:mod:`mk.harness.tracer`) runs that code
in-process, and a Python-level sandbox (audit hooks, patched modules, see
:mod:`mk.harness.policy`) cannot be airtight: ``ctypes``, ``gc`` walks,
frame objects and native extensions all reach around it. The policy is
therefore only a tripwire that turns obvious attempts into clear verdicts;
containment is the operating system's job, and this module provides it.

:func:`detect` probes, once per process, which mechanism works here and
returns an :class:`Isolation`; :meth:`Isolation.wrap` turns the tracer's
command line into the isolated one. The judge still runs the result with
``subprocess.Popen(..., pass_fds=keep_fds, close_fds=True,
start_new_session=True)`` and still applies its own deadlines, memory
watchdog and rlimits; isolation adds, it does not replace.

What each kind guarantees
-------------------------
``bwrap`` (bubblewrap, preferred; Debian/Ubuntu package ``bubblewrap``)
    A fresh user namespace in which the process is uid/gid 65534 with no
    capabilities (``--cap-drop ALL``, no-new-privs) and may not create further
    user namespaces (``--disable-userns``, so nothing can regain capabilities
    to remount what is read-only); its own pid namespace (bwrap is pid 1 and
    the process tree dies with it: a ``setsid``/double-forked daemon cannot
    outlive the run; ``/proc`` is a fresh, read-only proc showing only that
    namespace, so the judge's command line and environment are out of reach);
    its own network namespace (loopback only: no route anywhere); its own
    ipc, uts (hostname ``mk-sandbox``) and, where available, cgroup
    namespaces; a new terminal session (no ``TIOCSTI`` injection); and
    ``--die-with-parent``. The file system is a *minimal* read-only view:
    ``/usr`` (plus the ``/bin``, ``/lib``... links), a handful of ``/etc``
    files the loader and libc need, the interpreter's prefixes and its
    ``sys.path`` (as ``python -I`` sees it), and the ``mk`` package; a private
    ``/dev`` with only null/zero/full/random/urandom/tty; private size-capped
    tmpfs at ``/tmp`` and ``/dev/shm``. The work dir is the only host path
    that is writable. Home directories, the repository's task data, the
    judge's database and every other work dir do not exist inside.
    If no user namespace can be made (as root on a host that forbids them)
    bwrap runs without one (uid 0 with every capability dropped); the probe
    accepts that variant only when the sandboxed process itself cannot create
    a user namespace either.

``unshare`` (util-linux, the fallback where bubblewrap is missing)
    The same properties built by hand: ``unshare --pid --fork --kill-child
    --net --ipc --uts --cgroup --mount`` (with ``--map-root-user`` when the
    judge is not root), then a short Python prologue (``python -I -S``)
    inside the new namespaces builds the same minimal view on a tmpfs,
    ``pivot_root``s into it, makes everything but the work dir and the
    private tmpfs read-only, enters a nested user namespace in which the
    process is uid 65534 (user-namespace creation then disabled), closes every
    file descriptor but stdio and ``keep_fds``, calls ``setsid``, sets
    no-new-privs and execs the command as pid 2 under a tiny reaping init.
    ``setpriv --pdeathsig KILL`` ties the tree to the judge's lifetime where
    ``setpriv`` exists. As root on a host without user namespaces the nested
    one is skipped: uid 0 stays, with the bounding set emptied, capabilities
    cleared and ``SECBIT_NOROOT`` locked (accepted, as for bwrap, only when
    the sandboxed process cannot create a user namespace).

``none`` (macOS, Windows, locked-down containers without namespaces)
    The command runs unchanged; the judge's own measures (new session,
    scrubbed environment, rlimits, deadlines, memory watchdog, killing the
    process group) are all there is. Lost: a candidate can read anything the
    judge's user can (including secrets and the reference), write anywhere
    the judge can, use the network, see and signal other processes, and a
    child that calls ``setsid`` escapes the process-group kill and may
    outlive the run. The verdict says so via :attr:`Isolation.description`.

Not covered by any kind: system calls are not filtered (no seccomp), so a
kernel bug reachable from an unprivileged process is out of scope; CPU and
memory are bounded by the judge's watchdog, not by a cgroup; the work dir
itself is writable, so anything the judge later reads from it is a claim.

Notes for the caller
--------------------
- The work dir is hostile once the process has started: it can hold
  symlinks to anywhere (the judge would follow them; the sandbox would not),
  fifos, or huge files. Read results with ``O_NOFOLLOW``/``lstat`` checks and
  do not write into it afterwards.
- ``Popen.pid`` is the wrapper (bwrap, or setpriv/unshare), not the Python
  process: rlimits set with ``prlimit(pid)`` after ``Popen`` may miss the
  real process (the wrapper has usually forked it already); set them before exec (``preexec_fn``, a
  ``prlimit(1)`` prefix) or in the tracer itself (hard limits cannot be raised
  again without capabilities). Memory must be summed over the process tree.
- A command killed by signal N shows as exit status ``128 + N`` (both
  wrappers run their own init as pid 1), not ``-N``.
- ``--die-with-parent`` and ``--pdeathsig`` fire when the *thread* that
  started the wrapper exits: start it from a thread that outlives the run.
- Inside: no ``/sys`` (unless ``devices=True``), ``/proc`` read-only,
  ``HOME``/``TMPDIR`` are whatever the caller puts in the environment (the
  work dir's ``home``/``tmp``); JAX's CPU backend needs none of ``/sys``,
  ``/dev/shm`` or a writable ``/proc`` and imports and runs normally.

``MK_ISOLATION`` (or ``detect(prefer=...)``) names the kind to try first
(``bwrap``, ``unshare``, ``none`` or ``auto``); when it does not work here the
next stronger-to-weaker kind is used and :attr:`Isolation.notes` says why.

Startup cost (development container, 2 cores, Linux 6.18, bubblewrap 0.8,
util-linux 2.38; medians of 30 runs of ``python -I -c pass``): bare 44 ms;
under ``bwrap`` +6 ms; under ``unshare`` +30-36 ms (its prologue is a second,
``-S`` interpreter). :func:`detect` costs about 0.1 s once per process (one
``python -I`` run to learn ``sys.path`` and one probe per kind tried).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

KINDS = ("bwrap", "unshare", "none")
ENV_VAR = "MK_ISOLATION"
#: uid and gid of the sandboxed process (``nobody`` on Debian and most distributions)
SANDBOX_ID = 65534
HOSTNAME = "mk-sandbox"
#: size of each private tmpfs (``/tmp``, ``/dev/shm``): tmpfs pages are not in the process's RSS, so cap them
TMPFS_BYTES = 64 << 20
#: the directories of the root a program needs, bound read-only (or recreated as links where they are links)
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
#: entries of /etc the loader, libc and Python use; never the whole of /etc (shadow, keys, credentials)
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts", "host.conf",
        "localtime", "timezone", "alternatives", "os-release", "mime.types", "python3", "python3.11", "python3.12",
        "python3.13")
#: accelerator device nodes bound when ``wrap(devices=True)`` (GPU, TPU, AMD)
_ACCEL_GLOBS = ("nvidia*", "nvidia-caps", "nvidia-uvm*", "dri", "accel*", "vfio", "kfd")
_PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Isolation:
    """How the tracer is contained on this machine; build one with :func:`detect`."""

    kind: str  # "bwrap" | "unshare" | "none"
    description: str  # one line for the verdict
    binary: str = ""  # bwrap or unshare executable
    userns: bool = True  # own user namespace (uid 65534), or uid 0 with every capability dropped
    features: tuple[str, ...] = ()  # optional wrapper features found: "size", "disable-userns", "setpriv", "cgroup"
    ro_paths: tuple[str, ...] = ()  # the interpreter's prefixes and sys.path, bound read-only
    notes: tuple[str, ...] = ()  # why stronger kinds were not used

    def wrap(self, argv: Sequence[str], workdir: str | Path, keep_fds: Sequence[int] = (), *,
             extra_ro: Sequence[str | Path] = (), devices: bool = False) -> list[str]:
        """The command line that runs ``argv`` isolated, with ``workdir`` as its only writable host path.

        ``keep_fds`` are the descriptors the caller passes with ``Popen(pass_fds=...)``; both wrappers
        keep them (bwrap keeps every descriptor it is given, so the caller must leave ``close_fds`` on;
        the unshare prologue closes all others itself). ``extra_ro`` adds host paths, read-only at the
        same place. ``devices`` also binds the accelerator device nodes and ``/sys`` read-only (only for a
        process that must open the GPU/TPU; the tracer does not).
        """
        argv = [str(a) for a in argv]
        if self.kind == "none":
            return argv
        work = Path(os.path.abspath(workdir))
        if not work.is_dir() or work == Path("/"):
            raise ValueError(f"isolation needs an existing work dir other than /: {workdir}")
        ops = _view(self.ro_paths + tuple(str(p) for p in extra_ro), work, devices)
        if self.kind == "bwrap":
            return self._bwrap(ops, work) + ["--", *argv]
        if self.kind == "unshare":
            return self._unshare(ops, work, keep_fds) + argv
        raise ValueError(f"unknown isolation kind {self.kind!r}")

    def _bwrap(self, ops: list[tuple[str, ...]], work: Path) -> list[str]:
        cmd = [self.binary]
        if self.userns:
            cmd += ["--unshare-user", "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID)]
            if "disable-userns" in self.features:
                cmd.append("--disable-userns")
        cmd += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--hostname", HOSTNAME, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        late = []
        for op in ops:
            kind = op[0]
            if kind == "ro":
                cmd += ["--ro-bind", op[1], op[2]]
            elif kind == "rw":
                cmd += ["--bind", op[1], op[2]]
            elif kind == "node":
                cmd += ["--dev-bind", op[1], op[2]]
            elif kind == "symlink":
                cmd += ["--symlink", op[1], op[2]]
            elif kind == "tmpfs":
                if "size" in self.features:
                    cmd += ["--size", str(TMPFS_BYTES)]
                cmd += ["--tmpfs", op[1]]
            elif kind == "proc":
                cmd += ["--proc", op[1]]
                late += ["--remount-ro", op[1]]
            elif kind == "dev":
                cmd += ["--dev", op[1]]
                late += ["--remount-ro", op[1]]
            else:  # pragma: no cover - _view only makes the kinds above
                raise ValueError(op)
        return cmd + late + ["--remount-ro", "/", "--chdir", str(work)]

    def _unshare(self, ops: list[tuple[str, ...]], work: Path, keep_fds: Sequence[int]) -> list[str]:
        cmd: list[str] = []
        if "setpriv" in self.features:
            cmd += [shutil.which("setpriv") or "setpriv", "--pdeathsig", "KILL", "--"]
        cmd += [self.binary]
        if os.geteuid() != 0:
            cmd += ["--user", "--map-root-user"]
        cmd += ["--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts", "--mount", "--propagation", "private"]
        if "cgroup" in self.features:
            cmd.append("--cgroup")
        spec = {"ops": ops, "work": str(work), "keep": sorted({int(f) for f in keep_fds}), "id": SANDBOX_ID,
                "userns": self.userns, "hostname": HOSTNAME, "tmpfs": TMPFS_BYTES}
        return cmd + ["--", sys.executable, "-I", "-S", "-c", _PROLOGUE, json.dumps(spec), "--"]


# --- the file system view ------------------------------------------------------------------------------
def _view(ro_paths: Sequence[str], work: Path, devices: bool) -> list[tuple[str, ...]]:
    """Mount operations, in order, that build the sandbox's file system (shared by both wrappers)."""
    ops: list[tuple[str, ...]] = []
    bound: list[str] = []

    def covered(p: str) -> bool:
        return any(p == b or p.startswith(b.rstrip("/") + "/") for b in bound)

    def ro(src: str, dst: str | None = None) -> None:
        dst = dst or src
        if not covered(dst):
            ops.append(("ro", src, dst))
            bound.append(dst)

    for p in _SYSTEM:
        if os.path.islink(p):
            ops.append(("symlink", os.readlink(p), p))
        elif os.path.isdir(p):
            ro(p)
    for name in _ETC:
        p = "/etc/" + name
        if os.path.lexists(p) and os.path.exists(p):
            ro(p)
    ops += [("proc", "/proc"), ("dev", "/dev"), ("tmpfs", "/tmp"), ("tmpfs", "/dev/shm")]
    if devices:
        import glob

        for pattern in _ACCEL_GLOBS:
            for node in sorted(glob.glob("/dev/" + pattern)):
                ops.append(("node", node, node))
        if os.path.isdir("/sys"):
            ro("/sys")
    for p in sorted({os.path.abspath(p) for p in ro_paths}, key=lambda s: (s.count("/"), s)):
        if p == "/" or not os.path.exists(p) or p.startswith(("/proc/", "/dev/")) or p in ("/proc", "/dev"):
            continue
        real = os.path.realpath(p)
        if real == "/":
            continue
        ro(real, p)
        if real != p:
            ro(real)
    ops.append(("rw", os.path.realpath(work), str(work)))
    return ops


@functools.lru_cache(maxsize=None)
def _runtime_paths() -> tuple[str, ...]:
    """What ``sys.executable -I`` needs to read: its prefixes, its sys.path, and the mk package."""
    code = ("import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
            "sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable)), *sys.path]))")
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    try:
        out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL, env=_probe_env(), check=True).stdout
        paths += [p for p in json.loads(out) if isinstance(p, str) and p]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        log.warning("could not ask %s for its sys.path (%s); using this process's", sys.executable, exc)
        paths += [p for p in sys.path if p and os.path.isabs(p)]
    paths.append(str(Path(__file__).resolve().parents[1]))  # the mk package: an editable install is not in site-packages
    keep: list[str] = []
    for p in paths:
        p = os.path.abspath(p)
        if p not in keep and os.path.exists(p) and p != "/":
            keep.append(p)
    return tuple(keep)


# --- detection -------------------------------------------------------------------------------------------
def detect(prefer: str | None = None) -> Isolation:
    """The strongest isolation that works here (probed once per process and preference).

    ``prefer`` (default: the ``MK_ISOLATION`` environment variable) names the kind to try first;
    if it does not work the others follow from strongest to weakest. ``"none"`` always works."""
    want = (prefer if prefer is not None else os.environ.get(ENV_VAR, "")).strip().lower() or "auto"
    if want not in KINDS + ("auto",):
        log.warning("%s=%r is not one of %s or auto; probing automatically", ENV_VAR, want, ", ".join(KINDS))
        want = "auto"
    return _detect(want)


@functools.lru_cache(maxsize=None)
def _detect(want: str) -> Isolation:
    order = list(KINDS) if want == "auto" else [want] + [k for k in KINDS if k != want]
    notes: list[str] = []
    for kind in order:
        if kind == "none":
            break
        for candidate in _candidates(kind, notes):
            try:
                problem = _probe(candidate)
            except Exception as exc:  # never let the probe take the judge down
                problem = f"probe error: {type(exc).__name__}: {exc}"
            if problem is None:
                log.info("isolation: %s", candidate.description)
                return dataclasses.replace(candidate, notes=tuple(notes))
            notes.append(f"{candidate.kind}{'' if candidate.userns else ' (no user namespace)'}: {problem}")
            log.info("isolation %s unusable: %s", candidate.kind, problem)
    why = "; ".join(notes) if notes else "requested"
    return Isolation("none", f"no OS isolation ({why[:300]}): plain process in its own session; the candidate can "
                     "read and write what the judge's user can, reach the network and leave processes behind",
                     userns=False, notes=tuple(notes))


def _candidates(kind: str, notes: list[str]) -> list[Isolation]:
    if not sys.platform.startswith("linux"):
        notes.append(f"{kind}: needs Linux namespaces (platform {sys.platform})")
        return []
    binary = shutil.which(kind)
    if binary is None:
        notes.append(f"{kind}: not installed" + (" (apt-get install bubblewrap)" if kind == "bwrap" else ""))
        return []
    try:
        paths = _runtime_paths()
    except Exception as exc:  # pragma: no cover - defensive
        notes.append(f"{kind}: cannot list the interpreter's paths: {exc}")
        return []
    if kind == "bwrap":
        features = []
        try:
            help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            help_text = ""
        features += [f for f in ("size", "disable-userns") if f"--{f}" in help_text]
        view = "read-only minimal root, private /dev, /tmp and /dev/shm, writable work dir only"
        out = [Isolation("bwrap", "bubblewrap: user (uid 65534, no capabilities" +
                         (", no nested user namespaces" if "disable-userns" in features else "") +
                         f")/pid/net/ipc/uts/cgroup namespaces, {view}", binary, True, tuple(features), paths)]
        if os.geteuid() == 0:  # without a user namespace only root can make the others
            out.append(Isolation("bwrap", "bubblewrap: pid/net/ipc/uts/cgroup namespaces (no user namespace: uid 0 "
                                 f"with every capability dropped), {view}", binary, False, tuple(features), paths))
        return out
    features = ["cgroup"] if os.path.exists("/proc/self/ns/cgroup") else []
    if shutil.which("setpriv"):
        features.append("setpriv")
    view = "read-only minimal root via pivot_root, private /dev, /tmp and /dev/shm, writable work dir only"
    out = [Isolation("unshare", "unshare: user (uid 65534, no capabilities, no nested user namespaces)/pid/net/"
                     f"ipc/uts{'/cgroup' if 'cgroup' in features else ''} namespaces, {view}", binary, True,
                     tuple(features), paths)]
    if os.geteuid() == 0:
        out.append(Isolation("unshare", "unshare: pid/net/ipc/uts" + ("/cgroup" if "cgroup" in features else "") +
                             f" namespaces (no user namespace: uid 0 with every capability dropped), {view}", binary,
                             False, tuple(features), paths))
    return out


def _probe_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


#: run inside the candidate isolation: checks the properties the kind promises and reports on a kept fd
_PROBE = r"""
import ctypes, os, socket, sys
fd, judge, work = int(sys.argv[1]), sys.argv[2], sys.argv[3]
bad = []
if os.getpid() > 10: bad.append("no pid namespace (pid %d)" % os.getpid())
if int(judge) > 10 and judge in os.listdir("/proc"): bad.append("the judge is visible in /proc")
names = [n for _, n in socket.if_nameindex()]
if set(names) - {"lo"}: bad.append("network interfaces %s" % names)
for p in ("/mk-isolation-probe", "/usr/mk-isolation-probe", "/etc/mk-isolation-probe"):
    try:
        open(p, "w").close(); bad.append("wrote " + p)
    except OSError: pass
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0: bad.append("can create a user namespace")
open(os.path.join(work, "ok"), "w").write("ok")
import mk
os.write(fd, b"bad: " + "; ".join(bad).encode() if bad else b"ok")
"""


def _probe(iso: Isolation) -> str | None:
    """Run one trivial program under ``iso``; ``None`` when every promised property held, else what failed."""
    with tempfile.TemporaryDirectory(prefix="mk-isoprobe-") as tmp:
        work = Path(tmp)
        r, w = os.pipe()
        try:
            argv = [sys.executable, "-I", "-c", _PROBE, str(w), str(os.getpid()), str(work)]
            cmd = iso.wrap(argv, work, keep_fds=(w,))
            proc = subprocess.Popen(cmd, cwd=work, env=_probe_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, pass_fds=(w,), start_new_session=True)
            os.close(w)
            w = -1
            try:
                out, _ = proc.communicate(timeout=_PROBE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return f"probe did not finish in {_PROBE_TIMEOUT_S:.0f} s"
            report = os.read(r, 4096).decode("utf-8", "replace")
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        tail = out.decode("utf-8", "replace").strip().splitlines()[-1:] if out else []
        if proc.returncode != 0:
            return f"exit {proc.returncode}" + (f": {tail[0][:200]}" if tail else "")
        if report != "ok":
            return report[:300] or "the kept descriptor did not reach the sandbox"
        if (work / "ok").read_text() != "ok":
            return "the work dir was not writable"
    return None


# --- the unshare prologue --------------------------------------------------------------------------------
#: runs as ``python -I -S -c _PROLOGUE SPEC -- ARGV...`` as pid 1 inside the namespaces unshare made
_PROLOGUE = r"""
import ctypes, json, os, sys
def main():
    spec = json.loads(sys.argv[1]); argv = sys.argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
    def ck(r, what):
        if r != 0:
            e = ctypes.get_errno(); raise OSError(e, "%s: %s" % (what, os.strerror(e)))
    def b(s): return None if s is None else s.encode()
    def mount(src, dst, fs, flags, data=None): ck(libc.mount(b(src), b(dst), b(fs), flags, b(data)), "mount " + dst)
    def kept(path):  # atime and nosuid/nodev/noexec of a mount must be repeated when remounting it
        f = os.statvfs(path).f_flag
        return (f & (NOSUID | NODEV | NOEXEC | 1024 | 2048)) | ((1 << 21) if f & 4096 else 0)
    def remount_ro(path, extra=0):
        mount(None, path, None, REMOUNT | BIND | RDONLY | kept(path) | extra)
    uid, gid = os.getuid(), os.getgid()
    R = "/tmp"  # staging point for the new root; every source is held open first, so covering it hides nothing
    fds = {}
    for op in spec["ops"]:
        if op[0] in ("ro", "rw", "node"):
            fds[op[1]] = os.open(op[1], os.O_PATH | os.O_CLOEXEC)
    for n in ("null", "zero", "full", "random", "urandom", "tty"):
        if os.path.exists("/dev/" + n):
            fds.setdefault("/dev/" + n, os.open("/dev/" + n, os.O_PATH | os.O_CLOEXEC))
    mount(None, "/", None, REC | PRIVATE)
    mount("mk-root", R, "tmpfs", NOSUID | NODEV, "mode=0755,size=4m")
    def target(dst, src_fd):
        t = R + dst
        import stat
        if stat.S_ISDIR(os.fstat(src_fd).st_mode):
            os.makedirs(t, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(t), exist_ok=True)
            if not os.path.lexists(t): open(t, "w").close()
        return t
    def bind(src, dst, ro, nodev=True):
        fd = fds[src]; t = target(dst, fd)
        try:
            mount("/proc/self/fd/%d" % fd, t, None, BIND)
        except OSError:
            mount("/proc/self/fd/%d" % fd, t, None, BIND | REC)
        mount(None, t, None, REMOUNT | BIND | kept(t) | NOSUID | (NODEV if nodev else 0) | (RDONLY if ro else 0))
    size = "size=%d" % spec["tmpfs"]
    for op in spec["ops"]:
        k = op[0]
        if k == "ro": bind(op[1], op[2], True)
        elif k == "rw": bind(op[1], op[2], False)
        elif k == "node": bind(op[1], op[2], False, nodev=False)
        elif k == "symlink":
            os.makedirs(os.path.dirname(R + op[2]), exist_ok=True); os.symlink(op[1], R + op[2])
        elif k == "tmpfs":
            os.makedirs(R + op[1], exist_ok=True)
            mount("tmpfs", R + op[1], "tmpfs", NOSUID | NODEV, "mode=0755," + size)
        elif k == "proc":
            os.makedirs(R + op[1], exist_ok=True); mount("proc", R + op[1], "proc", NOSUID | NODEV | NOEXEC)
        elif k == "dev":
            d = R + op[1]
            os.makedirs(d, exist_ok=True); mount("tmpfs", d, "tmpfs", NOSUID | NOEXEC, "mode=0755,size=1m")
            for n in ("null", "zero", "full", "random", "urandom", "tty"):
                if "/dev/" + n in fds: bind("/dev/" + n, op[1] + "/" + n, False, nodev=False)
            for name, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
                os.symlink(to, d + "/" + name)
            os.makedirs(d + "/shm", exist_ok=True); os.makedirs(d + "/pts", exist_ok=True)
        else:
            raise ValueError("unknown op %r" % (op,))
    for fd in fds.values(): os.close(fd)
    if any(op[0] == "dev" for op in spec["ops"]):
        mount(None, R + "/dev", None, REMOUNT | RDONLY | NOSUID | NOEXEC)
    mount(None, R, None, REMOUNT | RDONLY | NOSUID | NODEV)
    os.chdir(R)
    pivot = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}.get(os.uname().machine)
    if pivot is None: raise OSError("pivot_root: unknown architecture " + os.uname().machine)
    ck(libc.syscall(pivot, b".", b"."), "pivot_root")
    ck(libc.umount2(b".", 2), "umount old root")  # MNT_DETACH
    os.chdir("/")
    ck(libc.sethostname(spec["hostname"].encode(), len(spec["hostname"])), "sethostname")
    if spec["userns"]:
        # a nested user namespace: uid/gid 65534 there is the judge's uid outside; every mount above is now locked
        ck(libc.unshare(0x10000000 | 0x00020000), "unshare(user, mount)")  # CLONE_NEWUSER | CLONE_NEWNS
        for name, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (spec["id"], uid)),
                           ("gid_map", "%d %d 1" % (spec["id"], gid))):
            with open("/proc/self/" + name, "w") as f: f.write(text)
        with open("/proc/sys/user/max_user_namespaces", "w") as f: f.write("0")
    remount_ro("/proc", NOSUID | NODEV | NOEXEC)
    os.chdir(spec["work"])
    keep = set(spec["keep"]) | {0, 1, 2}
    for fd in [int(x) for x in os.listdir("/proc/self/fd")]:
        if fd not in keep:
            try: os.close(fd)
            except OSError: pass
    os.setsid()
    for cap in range(64):  # empty the bounding set too (PR_CAPBSET_DROP; EINVAL past the last capability)
        libc.prctl(24, cap, 0, 0, 0)
    if spec["userns"]:
        os.setresgid(spec["id"], spec["id"], spec["id"])
        os.setresuid(spec["id"], spec["id"], spec["id"])  # leaving uid 0 clears every capability
    else:  # uid 0 stays (the work dir is the judge's); root must never regain capabilities, not even by exec
        # PR_SET_SECUREBITS: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, NO_CAP_AMBIENT_RAISE, each locked
        ck(libc.prctl(28, 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80, 0, 0, 0), "securebits")
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        ck(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    ck(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
    return argv, sorted(keep)
try:
    argv, held = main()
except Exception as exc:
    sys.stderr.write("mk isolation prologue failed: %s\n" % exc); sys.stderr.flush(); os._exit(125)
child = os.fork()
if child == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("mk isolation: cannot run %s: %s\n" % (argv[0], exc)); sys.stderr.flush()
    os._exit(127)
for fd in held:  # pid 1 holds nothing the command's peers wait on (a pipe's end of file, say)
    try: os.close(fd)
    except OSError: pass
while True:  # pid 1: reap every orphan until the command itself ends, then take the namespace down with us
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        os._exit(1)
    if pid == child:
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
"""
