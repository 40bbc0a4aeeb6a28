"""The sandbox worker: the only place a candidate's code runs.

Started by the judge (:mod:`mk.harness.sandbox`) as ``python -I -m
mk.harness.worker WORKDIR`` in a fresh process with a scrubbed environment.
``WORKDIR`` holds ``spec.json``, ``candidate.py``, the case inputs as
``.npy`` files and (when timing) the reference as a serialized ``jax.export``
artifact; the task itself never reaches this process (rule 8).

Phases, reported on a pipe as small fixed messages (never parsed from stdout):
``import`` (JAX, then the runtime policy, then the candidate) → ``compile``
(lower for the target; for tpu/gpu the jaxpr must hold a ``pallas_call``) →
``case i`` for every case (fresh inputs, outputs and post-call inputs written
as ``.npy``) → ``cost`` → ``timing`` (candidate and reference interleaved,
raw seconds written as ``.npy``). The judge computes every verdict.

Messages: ``BEGIN <phase> <i>``, ``OK <phase> <i> <seconds>``,
``FAIL <phase> <i> <json message>``, ``REJECT <phase> <i> <json message>``, ``END``.
"""

from __future__ import annotations

import time

_clock = time.perf_counter  # bound before any candidate code can exist in this process

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402

MAX_MESSAGE = 1500
SPEC_FILE = "spec.json"
CANDIDATE_FILE = "candidate.py"
REFERENCE_FILE = "reference.export"
OUT_DIR = "out"


# --- array files shared by judge and worker ------------------------------------
def save_arrays(folder: Path, prefix: str, arrays: Sequence[Any], indices: Sequence[int] | None = None) -> None:
    """Write ``prefix_<i>__<dtype>.npy`` files; dtypes numpy cannot name (bfloat16, fp8) are stored as raw unsigned ints."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, a in zip(indices if indices is not None else range(len(arrays)), arrays):
        a = np.asarray(a)
        raw = a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" else a
        np.save(folder / f"{prefix}_{i}__{a.dtype.name}.npy", raw, allow_pickle=False)


def load_indexed(folder: Path, prefix: str) -> dict[int, np.ndarray]:
    """Read the files :func:`save_arrays` wrote, keyed by index (never unpickling)."""
    out: dict[int, np.ndarray] = {}
    for f in folder.glob(f"{prefix}_*__*.npy"):
        head, _, dtype = f.stem.rpartition("__")
        idx = head[len(prefix) + 1 :]
        if not idx.isdigit():
            raise ValueError(f"unexpected array file {f.name}")
        a = np.load(f, allow_pickle=False)
        want = _dtype(dtype)
        if a.dtype != want:
            if a.dtype.kind != "u" or a.dtype.itemsize != want.itemsize:
                raise ValueError(f"{f.name}: stored dtype {a.dtype} does not match {dtype}")
            a = a.view(want)
        out[int(idx)] = a
    return out


def load_arrays(folder: Path, prefix: str) -> list[np.ndarray]:
    got = load_indexed(folder, prefix)
    if sorted(got) != list(range(len(got))):
        raise ValueError(f"{folder}: {prefix} files are not numbered 0..{len(got) - 1}")
    return [got[i] for i in range(len(got))]


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        if not hasattr(ml_dtypes, name):
            raise ValueError(f"unknown dtype {name!r}") from None
        return np.dtype(getattr(ml_dtypes, name))


# --- static values --------------------------------------------------------------
def encode_static(value: Any) -> Any:
    """JSON form of a static argument (tuples and dtypes tagged); raises TypeError otherwise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode_static(v) for v in value]}
    if isinstance(value, list):
        return [encode_static(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: encode_static(v) for k, v in value.items()}}
    try:
        return {"__dtype__": np.dtype(value).name}
    except TypeError:
        raise TypeError(f"static value {value!r} of type {type(value).__name__} cannot be sent to the sandbox") from None


def decode_static(value: Any) -> Any:
    if isinstance(value, list):
        return [decode_static(v) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(decode_static(v) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: decode_static(v) for k, v in value["__dict__"].items()}
        if "__dtype__" in value:
            import jax.numpy as jnp

            return getattr(jnp, value["__dtype__"])
    return value


# --- the worker ----------------------------------------------------------------
class _Channel:
    def __init__(self, fd: int):
        self.fd = fd

    def send(self, *parts: Any) -> None:
        os.write(self.fd, (" ".join(str(p) for p in parts) + "\n").encode())

    def error(self, kind: str, phase: str, index: int, exc: BaseException | str) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        self.send(kind, phase, index, json.dumps(text[:MAX_MESSAGE]))


def _has_pallas(jaxpr: Any, used: Sequence[bool] | None = None) -> bool:
    """True when a ``pallas_call`` contributes to the used outputs of ``jaxpr``.

    A liveness walk of our own: Pallas never lets JAX's dead-code elimination drop a ``pallas_call``, so a
    kernel whose result is discarded (the answer coming from plain jnp) would otherwise count as the kernel."""
    from jax.extend import core as jcore

    used = [True] * len(jaxpr.outvars) if used is None else list(used)
    live = {v for v, u in zip(jaxpr.outvars, used) if u and isinstance(v, jcore.Var)}
    for eqn in reversed(jaxpr.eqns):
        outs = [v in live for v in eqn.outvars]
        if not any(outs):
            continue
        if eqn.primitive.name == "pallas_call":
            return True
        live.update(v for v in eqn.invars if isinstance(v, jcore.Var))
        for v in eqn.params.values():
            for sub in v if isinstance(v, (list, tuple)) else (v,):
                inner = getattr(sub, "jaxpr", sub)
                if isinstance(inner, jcore.Jaxpr):
                    same = len(inner.outvars) == len(eqn.outvars)  # call-like (pjit, closed_call): outputs map 1:1
                    if _has_pallas(inner, outs if same else None):
                        return True
    return False


def _bind(entry: Callable[..., Any], static: list[Any], as_kwargs: bool, names: list[str], config: dict[str, Any]) -> Callable[..., Any]:
    if as_kwargs:
        kw = dict(zip(names, static), **config)
        return lambda *dyn: entry(*dyn, **kw)
    return lambda *dyn: entry(*dyn, *static, **config)


def run(workdir: Path) -> None:
    spec = json.loads((workdir / SPEC_FILE).read_text())
    chan = _Channel(int(spec["progress_fd"]))
    out = workdir / OUT_DIR
    phase, index = "import", 0
    try:
        chan.send("BEGIN", "import", 0)
        t0 = _clock()
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
        jax.devices()  # initialise the backends now: they probe /sys and libraries the policy will close
        import jax.experimental.pallas  # noqa: F401  (imported before the policy closes the file system)

        from jax import export

        from mk.harness.timing import interleaved_runs
        from mk.targets import get_target

        target = get_target(spec["target"])
        if target.name == "tpu":
            import jax.experimental.pallas.tpu  # noqa: F401
        cases = spec["cases"]
        inputs = [load_arrays(workdir / c["dir"], "in") for c in cases]
        timing_sets = [load_arrays(workdir / d, "in") for d in spec["timing"]["dirs"]] if spec.get("timing") else []
        reference = None
        if spec.get("timing"):  # deserialized before any candidate code could patch jax.export
            reference = jax.jit(export.deserialize(bytearray((workdir / REFERENCE_FILE).read_bytes())).call)
        block = jax.block_until_ready
        import importlib.util

        from mk.harness.policy import denied_events, install_sandbox_policy

        def forbidden(phase: str, index: int) -> bool:
            denied = denied_events()
            if denied:
                chan.error("REJECT", phase, index, f"the candidate attempted a forbidden operation: {denied[0]}")
            return bool(denied)

        install_sandbox_policy([str(workdir)])

        mod_spec = importlib.util.spec_from_file_location("candidate", workdir / CANDIDATE_FILE)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules["candidate"] = module
        mod_spec.loader.exec_module(module)
        entry = getattr(module, spec["entry"], None)
        if not callable(entry):
            chan.error("FAIL", "import", 0, f"the candidate's {spec['entry']!r} is not callable after import")
            return
        if forbidden("import", 0):
            return
        chan.send("OK", "import", 0, f"{_clock() - t0:.6f}")

        phase = "compile"
        chan.send("BEGIN", "compile", 0)
        t0 = _clock()
        config = spec.get("config") or {}
        bound = {
            s["name"]: _bind(entry, decode_static(s["static"]), spec["static_as_kwargs"], spec["static_names"], config)
            for s in spec["scales"]
        }
        structs = {s["name"]: [jax.ShapeDtypeStruct(tuple(sh), _dtype(dt)) for sh, dt in s["structs"]] for s in spec["scales"]}
        for name, fn in bound.items():
            if target.name == "cpu":
                with target.execution():
                    target.lower(lambda *a, fn=fn: fn(*a), *structs[name])
            else:
                target.lower(lambda *a, fn=fn: fn(*a), *structs[name])
            if spec["require_pallas"]:
                closed = jax.make_jaxpr(lambda *a, fn=fn: fn(*a))(*structs[name])
                if not _has_pallas(closed.jaxpr):
                    chan.error(
                        "REJECT", "compile", 0,
                        f"no pallas_call in the candidate's jaxpr for target {target.name} (scale {name}): "
                        "write the computation as a Pallas kernel, or evaluate with require_pallas=False for a pure-JAX rewrite",
                    )
                    return
        if forbidden("compile", 0):
            return
        chan.send("OK", "compile", 0, f"{_clock() - t0:.6f}")

        phase = "case"
        jitted = {name: jax.jit(lambda *a, fn=fn: fn(*a)) for name, fn in bound.items()}
        compiled: dict[str, Any] = {}

        def executable(name: str) -> Any:
            # One ahead-of-time executable per scale, used for the cases, the cost and the timing: the candidate's
            # Python runs only while it is traced here, so it cannot retrace (jax.clear_caches, call counters) and
            # swap in a cheaper computation once the correctness cases are over.
            if name not in compiled:
                compiled[name] = jitted[name].lower(*structs[name]).compile()
            return compiled[name]

        with target.execution():
            for i, case in enumerate(cases):
                index = i
                chan.send("BEGIN", "case", i)
                t0 = _clock()
                dev = [jax.device_put(np.array(x, copy=True)) for x in inputs[i]]
                result = block(executable(case["scale"])(*dev))
                leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(result)]
                seconds = _clock() - t0
                folder = out / case["dir"]
                save_arrays(folder, "out", leaves)
                alive = [(k, np.asarray(x)) for k, x in enumerate(dev) if not x.is_deleted()]
                save_arrays(folder, "in", [a for _, a in alive], [k for k, _ in alive])
                if forbidden("case", i):
                    return
                chan.send("OK", "case", i, f"{seconds:.6f}")

            index = 0
            if spec.get("cost"):
                phase = "cost"
                chan.send("BEGIN", "cost", 0)
                t0 = _clock()
                name = spec["cost"]["scale"]
                analysis = executable(name).cost_analysis()
                analysis = analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis or {}
                (out / "cost.json").write_text(
                    json.dumps({"flops": float(analysis.get("flops", -1.0)), "bytes": float(analysis.get("bytes accessed", -1.0))})
                )
                chan.send("OK", "cost", 0, f"{_clock() - t0:.6f}")

            if spec.get("timing"):
                phase = "timing"
                chan.send("BEGIN", "timing", 0)
                t0 = _clock()
                opts = spec["timing"]
                sets = [[jax.device_put(np.array(x, copy=True)) for x in arrays] for arrays in timing_sets]
                kept: dict[int, Any] = {}
                cand, ref = interleaved_runs(block, executable(opts["scale"]), reference, sets, _clock, opts, keep=kept)
                for k, result in kept.items():  # the judge checks what the timed runs returned, too
                    save_arrays(out / "timing" / f"set_{k}", "out", [np.asarray(x) for x in jax.tree_util.tree_leaves(result)])
                save_arrays(out / "timing", "cand", [np.asarray(cand, np.float64)])
                save_arrays(out / "timing", "ref", [np.asarray(ref, np.float64)])
                if forbidden("timing", 0):
                    return
                chan.send("OK", "timing", 0, f"{_clock() - t0:.6f}")
        chan.send("END")
    except BaseException as exc:  # noqa: BLE001 - everything the candidate raises is data for the judge
        denied = _denied()
        if denied:  # the sandbox stopped a forbidden operation: that is a rejection, not a failure
            chan.error("REJECT", phase, index, f"the candidate attempted a forbidden operation: {denied[0]}")
        else:
            chan.error("FAIL", phase, index, exc)


def _denied() -> list[str]:
    try:
        from mk.harness.policy import denied_events
    except ImportError:
        return []
    return list(denied_events())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    workdir = Path(args[0] if args else os.getcwd()).resolve()
    run(workdir)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip atexit hooks and thread joins a candidate may have left behind


if __name__ == "__main__":
    main()
