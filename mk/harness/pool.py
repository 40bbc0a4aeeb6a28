"""Warm judge processes: a spare tracer and a long-lived runner per environment.

A whole evaluation pays for two Python processes that import JAX. In one
process that judges many candidates (autotuning trials, a search, the test
suite) that start-up is paid ahead of time:

- **runner** (trusted code, never imports a candidate): one per environment,
  reused by every evaluation; each evaluation works in its own sub-folder and
  its ``load`` request replaces the previous programs. A runner that failed
  (timeout, crash) is dropped and a new one started.
- **tracer** (untrusted): never reused. After an evaluation takes one, a spare
  is started in the background, already isolated and with JAX imported, and
  waits for its candidate (``load`` reads ``spec.json`` and ``candidate.py``
  from its own fresh work dir).

Everything is killed at interpreter exit.
"""

from __future__ import annotations

import atexit
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping

from mk.harness.process import Child, remove_tree, tree_rss_mb

#: a warm runner that holds this much more than when it started is replaced
RUNNER_GROWTH_MB = 512.0

_lock = threading.Lock()
_root: Path | None = None
_runners: dict[tuple, Child] = {}
_spares: dict[tuple, Child] = {}
_count = 0


def _pool_root() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="mk-judge-pool-"))
        atexit.register(shutdown)
    return _root


def _key(env: Mapping[str, str], memory_mb: int, extra: Any = None) -> tuple:
    return (tuple(sorted(env.items())), memory_mb, extra)


def _new_dir(kind: str) -> Path:
    global _count
    _count += 1
    d = _pool_root() / f"{kind}-{_count}"
    d.mkdir()
    return d


def runner(env: Mapping[str, str], memory_mb: int) -> Child:
    """The live runner for ``env`` (started now if there is none)."""
    key = _key(env, memory_mb)
    with _lock:
        child = _runners.get(key)
        if child is not None and child.alive():
            return child
        workdir = _new_dir("runner")
        child = Child([sys.executable, "-I", "-B", "-m", "mk.harness.runner", str(workdir)], workdir, memory_mb, env=dict(env))
        _runners[key] = child.start()
        return child


def compiler(kind: str, memory_mb: int, estimate: bool = False) -> Child:
    """The live compile worker for chips of ``kind`` (``tpu`` or ``gpu``; started now if there is none): trusted code,
    reused like the runner (:mod:`mk.harness.compiler`). ``estimate``: a separate worker that also records libtpu's
    static schedule (:mod:`mk.harness.estimate`), so its failures never touch a verdict's compile."""
    from mk.harness.compiler import environment

    key = ("compiler", kind, memory_mb, estimate)
    with _lock:
        child = _runners.get(key)
        if child is not None and child.alive():
            return child
        workdir = _new_dir(f"compiler-{kind}")
        child = Child([sys.executable, "-I", "-B", "-m", "mk.harness.compiler", str(workdir)], workdir, memory_mb,
                      env=environment(kind, workdir, estimate))
        _runners[key] = child.start()
        return child


def tracer(env: Mapping[str, str], memory_mb: int, isolation: Any) -> Child:
    """A started, isolated tracer waiting for its candidate; a spare for the next evaluation starts after it."""
    key = _key(env, memory_mb, isolation.kind)
    with _lock:
        child = _spares.pop(key, None)
    if child is None or not child.alive():
        child = _spawn_tracer(env, memory_mb, isolation)
    return child


def prepare_spare(env: Mapping[str, str], memory_mb: int, isolation: Any) -> None:
    """Start the next tracer now (call when the machine is otherwise idle: after a verdict)."""
    key = _key(env, memory_mb, isolation.kind)
    with _lock:
        if key in _spares and _spares[key].alive():
            return
        _spares[key] = _spawn_tracer(env, memory_mb, isolation)


def _spawn_tracer(env: Mapping[str, str], memory_mb: int, isolation: Any) -> Child:
    workdir = _new_dir("tracer")
    argv = [sys.executable, "-I", "-B", "-m", "mk.harness.tracer", str(workdir)]
    return Child(argv, workdir, memory_mb, env=dict(env), wrapper=lambda a, w, fds: isolation.wrap(a, w, keep_fds=fds)).start()


def discard(child: Child) -> None:
    """Kill ``child`` and remove its work dir (a tracer after its evaluation; a runner that failed)."""
    child.close()
    with _lock:
        for table in (_runners, _spares):
            for k, v in list(table.items()):
                if v is child:
                    del table[k]
    child.remove()


def recycle_if_grown(child: Child, limit_mb: float = RUNNER_GROWTH_MB) -> None:
    """Drop a warm runner whose resident memory grew by more than ``limit_mb`` since it started (what one
    evaluation left behind must not decide the next one's verdict)."""
    rss = tree_rss_mb(child.proc.pid) if child.proc is not None else 0.0
    base = getattr(child, "baseline_mb", None)
    if base is None:
        child.baseline_mb = rss
    elif rss - base > limit_mb:
        discard(child)


def shutdown() -> None:
    with _lock:
        children = [*_runners.values(), *_spares.values()]
        _runners.clear()
        _spares.clear()
    for child in children:
        child.close()
    if _root is not None:
        remove_tree(_root)
