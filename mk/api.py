"""The Python API: ``mk.optimize(fn, shapes)`` and the callable it returns.

``optimize`` builds a task from a plain JAX function (:func:`mk.loaders.task_from_callable`), runs the main job
(:func:`mk.job.optimize_task`) and caches the result in the store; :class:`OptimizedFunction` runs the verified
kernel where it was verified and the reference elsewhere.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any, Callable

from mk import __version__
from mk.errors import ConfigError
from mk.job import OptimizeReport, optimize_task
from mk.task import Task

log = logging.getLogger(__name__)


class OptimizedFunction:
    """Callable returned by :func:`optimize`: the best kernel where verified, else the reference (with a warning).

    The kernel runs only on inputs of a verified shape and dtype, and only where its target's device is present
    (``cpu`` kernels anywhere); :meth:`run_kernel` runs it regardless (TPU/GPU kernels interpreted on a CPU)."""

    def __init__(self, fn: Callable[..., Any], task: Task, report: OptimizeReport, source: str | None, *, cached: bool = False):
        self.reference = fn
        self.task = task
        self.report = report
        self.source = source
        self.cached = cached
        self._kernel = None
        if source:
            namespace: dict[str, Any] = {}
            exec(compile(source, report.kernel_path or f"<mk kernel {task.name}>", "exec"), namespace)  # noqa: S102 - judged
            self._kernel = namespace["kernel"]
        self._verified = {
            tuple((tuple(shape), a.dtype) for shape, a in zip(task.shapes(n), task.args)) for n in task.scales
        }

    def __call__(self, *args: Any) -> Any:
        from mk.targets import get_target

        signature = tuple((tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", ""))) for a in args)
        target = get_target(self.report.target)
        if self._kernel is None:
            why = "no verified kernel"
        elif signature not in self._verified:
            why = f"no verified kernel for inputs {signature}"
        elif target.name != "cpu" and not target.device_present():
            why = f"the kernel was verified for {target.name}, and this machine has no {target.name.upper()}"
        else:
            return self._kernel(*args)
        warnings.warn(f"mk: {why}; running the reference", stacklevel=2)
        return self.reference(*args)

    def run_kernel(self, *args: Any) -> Any:
        """Run the kernel here whatever the device (TPU/GPU kernels in Pallas interpret mode on a CPU)."""
        from mk.targets import get_target

        if self._kernel is None:
            raise ConfigError("there is no verified kernel to run", hint=self.report.stop_reason)
        with get_target(self.report.target).execution():
            return self._kernel(*args)

    def save(self, path: str | Path) -> Path:
        if not self.source:
            raise ConfigError("there is no verified kernel to save", hint=self.report.stop_reason)
        p = Path(path)
        p.write_text(self.source)
        return p


def cache_key(fn: Callable[..., Any], task: Task, target: str) -> str:
    """(function source, shapes and dtypes of every scale, statics, target, device kind, mk version) as a hash."""
    import hashlib
    import inspect

    from mk.targets import get_target

    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        source = repr((code.co_code, code.co_consts)) if code is not None else repr(fn)
    spec = task.describe()
    blob = json.dumps({"source": source, "inputs": spec["inputs"], "scales": spec["scales"], "static": spec["static"],
                       "target": target, "device": get_target(target).device_kind() or "none", "mk": __version__},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def optimize(fn: Callable[..., Any], shapes: Any, *, cache: bool = True, **kwargs: Any) -> OptimizedFunction:
    """Optimise ``fn`` for ``shapes`` and return a callable running the best kernel.

    Results are cached in the store by :func:`cache_key`, so a second call with the same function, shapes, device
    and mk version returns at once (``cache=False`` recomputes)."""
    from datetime import datetime, timezone

    from mk.loaders import task_from_callable
    from mk.store import Store
    from mk.targets import get_target

    task_kw = {k: kwargs.pop(k) for k in ("static", "atol", "rtol", "name", "scales") if k in kwargs}
    task = task_from_callable(fn, shapes, **task_kw)
    target = kwargs.get("target", "tpu")
    key = cache_key(fn, task, target)
    if cache:
        with Store.open(kwargs.get("db")) as store:
            rows = store.query("select kernel_source, report from optimize_cache where key = ?", [key])
        if rows:
            report = OptimizeReport(**rows[0]["report"])
            log.info("mk.optimize: cached result of run %s", report.run_id)
            return OptimizedFunction(fn, task, report, rows[0]["kernel_source"], cached=True)
    report = optimize_task(task, **kwargs)
    source = Path(report.kernel_path).read_text() if report.kernel_path else None
    with Store.open(kwargs.get("db")) as store:
        store.execute("delete from optimize_cache where key = ?", [key])
        store.execute("insert into optimize_cache values (?, ?, ?, ?, ?, ?, ?, ?)",
                      [key, task.name, target, get_target(target).device_kind() or "none", report.run_id, source,
                       json.dumps(report.to_dict(), default=str), datetime.now(timezone.utc).replace(tzinfo=None)])
    return OptimizedFunction(fn, task, report, source)
