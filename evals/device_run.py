"""Run mk's exported GPU kernels against the XLA references on a real GPU: correctness and speed at full scale.

    PYTHONUNBUFFERED=1 python3 evals/device_run.py --manifest .device/manifest.json \\
        --out $OUT/device_results.json --budget-s 420
    python evals/device_run.py --dry-run          # anywhere: checks the manifest, inputs, programs and sources

Reads what ``python -m evals.device_export`` wrote (``.device/``: one folder per task with the reference's and
each candidate's ``jax.export`` program for ``cuda``, the candidates' sources, structured inputs as .npy, and
``manifest.json``). Imports only jax, numpy and the standard library: never mk.

Per task: the inputs are drawn once (each floating input from its init, on the device with ``jax.random`` from a
fixed seed, or ``--inputs numpy``; structured inputs from their .npy); the reference program is deserialized and
compiled; then each candidate: its exported program (``path: exported``) or, when that fails to deserialize,
compile or run (a Triton IR written by another jaxlib), its source imported and jitted at the same shapes
(``path: source``); one run compared with the reference (max abs / rel error, elements over
``atol + rtol * |ref|``: pass/fail); then timed interleaved with the reference (warm-up, then alternating runs,
each ``jax.block_until_ready``): medians, IQR, speedup = reference median / candidate median. Every error is
recorded for its entry; the run goes on. New tasks are not started after ``--budget-s``. The results file is
rewritten after every task, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: set by main() after the backend choice (``--dry-run`` forces the CPU before JAX is imported)
jax: Any = None
jnp: Any = None
np: Any = None


def _import_jax() -> None:
    global jax, jnp, np
    import jax as _jax
    import jax.export  # noqa: F401  (jax.export.deserialize)
    import jax.numpy as _jnp
    import numpy as _np

    jax, jnp, np = _jax, _jnp, _np


def _err(exc: BaseException, limit: int = 3000) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text[:limit]


def _tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]


def _nvidia_smi() -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw",
                            "--format=csv"], capture_output=True, text=True, timeout=30)
        return (r.stdout or r.stderr).strip()
    except Exception as exc:  # noqa: BLE001 - not on every machine
        return f"unavailable: {_err(exc, 200)}"


# --- statics ------------------------------------------------------------------------------------------------------
def _decode(v: Any) -> Any:
    if isinstance(v, dict):
        if "__tuple__" in v:
            return tuple(_decode(x) for x in v["__tuple__"])
        if "__dtype__" in v:
            return jnp.dtype(v["__dtype__"])
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


# --- inputs -------------------------------------------------------------------------------------------------------
def _draw_jax(init: dict[str, Any], shape: tuple[int, ...], dtype: Any, key: Any) -> Any:
    kind = init["kind"]
    f32 = jnp.float32
    if kind == "normal":
        x = jax.random.normal(key, shape, f32) * f32(init.get("std", 1.0)) + f32(init.get("mean", 0.0))
    elif kind == "uniform":
        x = jax.random.uniform(key, shape, f32, init.get("low", 0.0), init.get("high", 1.0))
    elif kind == "randint":
        return jax.random.randint(key, shape, int(init.get("low", 0)), int(init.get("high", 1)), jnp.int32).astype(dtype)
    elif kind == "ones":
        x = jnp.ones(shape, f32)
    elif kind == "zeros":
        x = jnp.zeros(shape, f32)
    elif kind == "constant":
        x = jnp.full(shape, init.get("value", 0.0), f32)
    elif kind == "negative":
        x = -jnp.abs(jax.random.normal(key, shape, f32) * f32(init.get("std", 1.0)) + f32(init.get("mean", 0.0)))
    elif kind == "outliers":
        k1, k2, k3 = jax.random.split(key, 3)
        x = jax.random.normal(k1, shape, f32) * f32(init.get("std", 1.0)) + f32(init.get("mean", 0.0))
        hit = jax.random.uniform(k2, shape) < 0.01
        sign = jnp.where(jax.random.uniform(k3, shape) < 0.5, -1.0, 1.0)
        x = jnp.where(hit, sign * f32(init.get("value", 0.0)), x)
    else:
        raise ValueError(f"cannot draw an input with init {init!r} (no .npy saved for it)")
    return x.astype(dtype)


def _draw_numpy(init: dict[str, Any], shape: tuple[int, ...], dtype: Any, rng: Any) -> Any:
    kind = init["kind"]
    size = 1
    for d in shape:
        size *= d
    if kind == "randint":
        return rng.integers(int(init.get("low", 0)), int(init.get("high", 1)), size=shape).astype(dtype)
    out = np.empty(size, dtype)
    chunk = 1 << 22
    for lo in range(0, size, chunk):
        n = min(chunk, size - lo)
        if kind == "normal":
            x = rng.standard_normal(n, dtype=np.float32) * np.float32(init.get("std", 1.0)) + np.float32(init.get("mean", 0.0))
        elif kind == "uniform":
            x = rng.uniform(init.get("low", 0.0), init.get("high", 1.0), size=n).astype(np.float32)
        elif kind in ("ones", "zeros", "constant"):
            x = np.full(n, {"ones": 1.0, "zeros": 0.0}.get(kind, init.get("value", 0.0)), np.float32)
        elif kind == "negative":
            x = -np.abs(rng.standard_normal(n, dtype=np.float32) * np.float32(init.get("std", 1.0)) + np.float32(init.get("mean", 0.0)))
        else:
            raise ValueError(f"cannot draw an input with init {init!r} in numpy")
        out[lo:lo + n] = x.astype(dtype)
    return out.reshape(shape)


def build_inputs(task: dict[str, Any], folder: Path, *, mode: str, seed: int, abstract: bool = False) -> list[Any]:
    """The task's inputs on the default device (``abstract``: ShapeDtypeStructs from the same code, nothing drawn)."""
    out = []
    for i, spec in enumerate(task["inputs"]):
        shape, dtype = tuple(spec["shape"]), jnp.dtype(spec["dtype"])
        if spec.get("npy"):
            arr = np.load(folder / spec["npy"])
            if spec.get("npy_view"):
                arr = arr.view(jnp.dtype(spec["npy_view"]))
            if tuple(arr.shape) != shape or arr.dtype != dtype:
                raise ValueError(f"{spec['npy']} holds {arr.dtype}{list(arr.shape)}, the manifest says {dtype}{list(shape)}")
            out.append(jax.ShapeDtypeStruct(arr.shape, arr.dtype) if abstract else jax.device_put(arr))
            continue
        init = spec["init"]
        if mode == "numpy" and not abstract:
            rng = np.random.default_rng([seed, i])
            out.append(jax.device_put(_draw_numpy(init, shape, dtype, rng)))
            continue
        draw = jax.jit(functools.partial(_draw_jax, init, shape, dtype))
        key = jax.random.fold_in(jax.random.key(seed), i)
        out.append(jax.eval_shape(draw, key) if abstract else draw(key))
    if not abstract:
        jax.block_until_ready(out)
    return out


def _check_structs(task: dict[str, Any], xs: list[Any]) -> list[str]:
    bad = []
    for spec, x in zip(task["inputs"], xs):
        if list(x.shape) != list(spec["shape"]) or str(x.dtype) != spec["dtype"]:
            bad.append(f"{spec['name']}: built {x.dtype}{list(x.shape)}, manifest {spec['dtype']}{spec['shape']}")
    if len(xs) != len(task["inputs"]):
        bad.append(f"built {len(xs)} inputs for {len(task['inputs'])}")
    return bad


# --- programs -----------------------------------------------------------------------------------------------------
def load_exported(path: Path) -> Any:
    return jax.export.deserialize(bytearray(path.read_bytes()))


def _aval_mismatch(exp: Any, xs: list[Any]) -> str | None:
    want = [(tuple(a.shape), str(a.dtype)) for a in exp.in_avals]
    got = [(tuple(x.shape), str(x.dtype)) for x in xs]
    return None if want == got else f"the program takes {want}, the inputs are {got}"


def _source_fn(folder: Path, task: dict[str, Any], cand: dict[str, Any]) -> Any:
    """The candidate's entry from its source file, with the task's statics and the manifest's config bound."""
    path = folder / cand["source_file"]
    name = f"_device_cand_{abs(hash((str(folder), cand['name'])))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    entry = getattr(module, cand["entry"])
    st = task.get("statics") or {"names": [], "values": [], "as_kwargs": False}
    values = [_decode(v) for v in st["values"]]
    config = {k: _decode(v) for k, v in (cand.get("config") or {}).items()}
    if st["as_kwargs"]:
        kw = dict(zip(st["names"], values), **config)
        return lambda *dyn: entry(*dyn, **kw)
    return lambda *dyn: entry(*dyn, *values, **config)


def _compile(fn: Any, xs: list[Any]) -> tuple[Any, float, dict[str, Any]]:
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*xs).compile()
    seconds = time.perf_counter() - t0
    info: dict[str, Any] = {}
    try:
        ma = compiled.memory_analysis()
        if ma is not None:
            info["temp_bytes"] = int(getattr(ma, "temp_size_in_bytes", 0) or 0)
    except Exception:  # noqa: BLE001 - optional figure
        pass
    return compiled, seconds, info


def _run_once(compiled: Any, xs: list[Any]) -> tuple[list[Any], float]:
    t0 = time.perf_counter()
    out = compiled(*xs)
    jax.block_until_ready(out)
    return jax.tree_util.tree_leaves(out), time.perf_counter() - t0


# --- comparison ---------------------------------------------------------------------------------------------------
#: the comparison, jitted once (lazily: jax is imported in main)
_STATS: dict[str, Any] = {}


def _stats_fn() -> Any:
    if "fn" not in _STATS:
        def stats(r: Any, c: Any, atol: Any, rtol: Any) -> Any:
            f32 = jnp.float32
            r32, c32 = r.astype(f32), c.astype(f32)
            fin_r, fin_c = jnp.isfinite(r32), jnp.isfinite(c32)
            both = fin_r & fin_c
            diff = jnp.where(both, jnp.abs(c32 - r32), 0.0)
            ar = jnp.abs(jnp.where(fin_r, r32, 0.0))
            tiny = jnp.where(atol > 0, atol, jnp.finfo(f32).tiny)
            return {
                "max_abs": jnp.max(diff, initial=0.0),
                "max_rel": jnp.max(diff / jnp.maximum(ar, tiny), initial=0.0),
                "over": jnp.sum(both & (diff > atol + rtol * ar)),
                "nonfinite_where_ref_finite": jnp.sum(fin_r & ~fin_c),
                "nonfinite_mismatch": jnp.sum(~fin_r & ~((jnp.isnan(r32) & jnp.isnan(c32)) | (r32 == c32))),
                "ref_max_abs": jnp.max(ar, initial=0.0),
            }

        _STATS["fn"] = jax.jit(stats)
    return _STATS["fn"]


def _tol(v: Any, k: int) -> float:
    return float(v[min(k, len(v) - 1)]) if isinstance(v, list) else float(v)


def compare(ref: list[Any], cand: list[Any], tolerance: dict[str, Any]) -> dict[str, Any]:
    if len(ref) != len(cand):
        return {"pass": False, "reason": f"{len(cand)} outputs, the reference has {len(ref)}"}
    out: dict[str, Any] = {"pass": True, "max_abs": 0.0, "max_rel": 0.0, "outputs": []}
    for k, (r, c) in enumerate(zip(ref, cand)):
        if tuple(r.shape) != tuple(c.shape) or r.dtype != c.dtype:
            out.update({"pass": False, "reason": f"output {k}: {c.dtype}{list(c.shape)} vs the reference's {r.dtype}{list(r.shape)}"})
            return out
        atol, rtol = _tol(tolerance["atol"], k), _tol(tolerance["rtol"], k)
        got = {n: v.item() for n, v in jax.device_get(_stats_fn()(r, c, jnp.float32(atol), jnp.float32(rtol))).items()}
        got.update(atol=atol, rtol=rtol, size=int(r.size))
        ok = got["over"] == 0 and got["nonfinite_where_ref_finite"] == 0 and got["nonfinite_mismatch"] == 0
        got["pass"] = ok
        out["outputs"].append(got)
        out["max_abs"] = max(out["max_abs"], got["max_abs"])
        out["max_rel"] = max(out["max_rel"], got["max_rel"])
        if not ok and out["pass"]:
            out["pass"] = False
            out["reason"] = (f"output {k}: {got['over']} of {got['size']} elements over atol {atol:g} + rtol {rtol:g} * |ref|"
                             f" (max abs {got['max_abs']:.3g}), {got['nonfinite_where_ref_finite']} non-finite where the "
                             "reference is finite")
    return out


# --- timing -------------------------------------------------------------------------------------------------------
def _summary(ts: list[float]) -> dict[str, Any]:
    if not ts:
        return {"n": 0}
    q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0], ts[0], ts[0]]
    return {"n": len(ts), "median_ms": statistics.median(ts) * 1e3, "q25_ms": q[0] * 1e3, "q75_ms": q[2] * 1e3,
            "iqr_ms": (q[2] - q[0]) * 1e3, "min_ms": min(ts) * 1e3, "mean_ms": statistics.fmean(ts) * 1e3}


def _call(fn: Any, xs: list[Any], reps: int = 1) -> float:
    """Seconds per call: ``reps`` calls queued back to back (one stream: the last one done means all are), then
    ``jax.block_until_ready``, so Python's dispatch does not count for programs well under a millisecond."""
    t0 = time.perf_counter()
    for _ in range(reps - 1):
        fn(*xs)
    out = fn(*xs)
    jax.block_until_ready(out)
    dt = time.perf_counter() - t0
    del out
    return dt / reps


def time_interleaved(fns: dict[str, Any], xs: list[Any], *, warmup: int, iters: int, max_s: float,
                     min_sample_s: float = 2e-3) -> dict[str, Any]:
    """Warm-up, then ``iters`` rounds in which every function runs once (the order alternating round by round);
    fewer rounds (at least 5) when the rounds would take past ``max_s``. A function faster than ``min_sample_s``
    is called several times per sample (``reps``) and the sample is the time per call."""
    names = list(fns)
    last = {n: 0.0 for n in names}
    for _ in range(warmup):
        for n in names:
            last[n] = _call(fns[n], xs)
    reps = {n: max(1, min(100, math.ceil(min_sample_s / last[n]))) if last[n] > 0 else 1 for n in names}
    per_round = sum(last[n] * reps[n] for n in names)
    rounds = iters if per_round * iters <= max_s else max(5, int(max_s / max(per_round, 1e-9)))
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(rounds):
        for n in (names if i % 2 == 0 else names[::-1]):
            times[n].append(_call(fns[n], xs, reps[n]))
    out: dict[str, Any] = {n: {**_summary(ts), "reps": reps[n]} for n, ts in times.items()}
    out["rounds"] = rounds
    out["warmup"] = warmup
    return out


# --- one task -----------------------------------------------------------------------------------------------------
def _kernels(compiled: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [{k: v for k, v in kern.items() if v is not None} for kern in (compiled or {}).get("kernels", [])]


def _prediction(cand: dict[str, Any]) -> dict[str, Any]:
    """What the deviceless compile for the manifest's chip (an H100) predicted: ``evaluate``'s verdict at ci with the
    full scale compiled only (absent when the verdict stopped before the compile stage reached full), and the compile
    of exactly the exported full-scale program this run loads (``direct``)."""
    p = cand.get("prediction") or {}
    full = next((c for c in p.get("compiled") or [] if c.get("scale") == "full"), None)
    d = cand.get("direct_compile") or {}
    return {"status": p.get("status"), "reason": (p.get("reason") or "")[:300] or None, "error": p.get("error") or p.get("skipped"),
            "full_ok": p.get("full_ok"), "full_summary": p.get("full_summary"), "full_spill_bytes": p.get("full_spill_bytes"),
            "full_temp_bytes": (full or {}).get("temp_bytes"),
            "direct_ok": d.get("ok"), "direct_summary": d.get("summary") or d.get("error") or d.get("skipped"),
            "direct_spill_bytes": d.get("spill_bytes"), "direct_temp_bytes": (d.get("compiled") or {}).get("temp_bytes"),
            "direct_kernels": _kernels(d.get("compiled"))}


def run_task(task: dict[str, Any], root: Path, args: argparse.Namespace, started: float) -> dict[str, Any]:
    folder = root / task["dir"]
    res: dict[str, Any] = {"task": task["task"], "candidates": []}
    t_task = time.perf_counter()
    # inputs
    try:
        t0 = time.perf_counter()
        xs = build_inputs(task, folder, mode=args.inputs, seed=args.seed, abstract=args.dry_run)
        res["inputs_s"] = round(time.perf_counter() - t0, 2)
        res["inputs"] = [f"{x.dtype}{list(x.shape)}" for x in xs]
        bad = _check_structs(task, xs)
        if bad:
            res["error"] = "inputs: " + "; ".join(bad)
            return res
        res["input_bytes"] = int(sum(x.size * jnp.dtype(x.dtype).itemsize for x in xs))
    except Exception as exc:  # noqa: BLE001
        res["error"] = f"inputs: {_err(exc)}"
        res["traceback"] = _tb(exc)
        return res
    # the reference
    d = task["reference"].get("direct_compile") or {}
    ref: dict[str, Any] = {"file": task["reference"]["file"],
                           "predicted": {"direct_ok": d.get("ok"), "direct_summary": d.get("summary") or d.get("error"),
                                         "direct_temp_bytes": (d.get("compiled") or {}).get("temp_bytes")}}
    ref_fn = ref_out = None
    try:
        t0 = time.perf_counter()
        exp = load_exported(folder / task["reference"]["file"])
        ref["platforms"] = list(exp.platforms)
        mismatch = _aval_mismatch(exp, xs)
        if mismatch:
            raise ValueError(mismatch)
        if args.dry_run:
            ref["deserialized_s"] = round(time.perf_counter() - t0, 3)
        else:
            ref_fn, ref["compile_s"], info = _compile(exp.call, xs)
            ref.update(info)
            ref_out, ref["first_run_s"] = _run_once(ref_fn, xs)
            ref["outputs"] = [f"{o.dtype}{list(o.shape)}" for o in ref_out]
    except Exception as exc:  # noqa: BLE001 - candidates are still timed alone
        ref["error"] = _err(exc)
        ref["traceback"] = _tb(exc)
        ref_fn = ref_out = None
    res["reference"] = ref
    # the candidates
    for cand in task.get("candidates", []):
        elapsed = time.perf_counter() - started
        c: dict[str, Any] = {"name": cand["name"], "template": cand.get("template"), "predicted": _prediction(cand)}
        res["candidates"].append(c)
        if elapsed > args.budget_s:
            c["skipped"] = f"time budget of {args.budget_s:.0f} s spent after {elapsed:.0f} s"
            continue
        try:
            run_candidate(c, cand, task, folder, xs, ref_fn, ref_out, args)
        except Exception as exc:  # noqa: BLE001 - never the whole run
            c["error"] = _err(exc)
            c["traceback"] = _tb(exc)
    del xs, ref_out
    res["seconds"] = round(time.perf_counter() - t_task, 1)
    return res


def run_candidate(c: dict[str, Any], cand: dict[str, Any], task: dict[str, Any], folder: Path, xs: list[Any],
                  ref_fn: Any, ref_out: list[Any] | None, args: argparse.Namespace) -> None:
    fn = out = None
    # 1. the exported program
    if args.source_only:
        c["exported_error"] = "not tried (--source-only)"
    elif cand.get("file"):
        try:
            t0 = time.perf_counter()
            exp = load_exported(folder / cand["file"])
            c["exported_platforms"] = list(exp.platforms)
            mismatch = _aval_mismatch(exp, xs)
            if mismatch:
                raise ValueError(mismatch)
            if args.dry_run:
                c["exported"] = "deserialized"
                c["deserialized_s"] = round(time.perf_counter() - t0, 3)
            else:
                fn, c["compile_s"], info = _compile(exp.call, xs)
                c.update(info)
                out, c["first_run_s"] = _run_once(fn, xs)
                c["path"] = "exported"
        except Exception as exc:  # noqa: BLE001 - e.g. Triton IR from another jaxlib: the source is tried next
            c["exported_error"] = _err(exc)
            fn = out = None
    else:
        c["exported_error"] = f"not exported here: {cand.get('export_error')}"
    # 2. the source, when the exported program did not run (and always in a dry run: lowered for cuda only)
    if fn is None:
        try:
            src = _source_fn(folder, task, cand)
            if args.dry_run:
                t0 = time.perf_counter()
                traced = jax.jit(src).trace(*xs)
                try:
                    traced.lower(lowering_platforms=("cuda",))
                    c["source"] = "imported and lowered for cuda"
                except Exception as exc:  # noqa: BLE001 - newer jax lowers for cuda only with a (real or abstract) GPU
                    c["source"] = "imported and traced (not lowered for cuda here)"
                    c["source_lower_error"] = _err(exc, 300)
                c["source_lower_s"] = round(time.perf_counter() - t0, 2)
                return
            fn, c["compile_s"], info = _compile(src, xs)
            c.update(info)
            out, c["first_run_s"] = _run_once(fn, xs)
            c["path"] = "source"
        except Exception as exc:  # noqa: BLE001
            c["source_error"] = _err(exc)
            c["traceback"] = _tb(exc)
            return
    c["outputs"] = [f"{o.dtype}{list(o.shape)}" for o in out]
    # 3. correctness against the reference's run
    if ref_out is not None:
        c["compare"] = compare(ref_out, out, task["tolerance"])
        c["pass"] = c["compare"]["pass"]
    del out
    # 4. timing, interleaved with the reference
    fns = {"reference": ref_fn, "candidate": fn} if ref_fn is not None else {"candidate": fn}
    t = time_interleaved(fns, xs, warmup=args.warmup, iters=args.iters, max_s=args.max_timing_s)
    c["timing"] = t
    if ref_fn is not None and t["candidate"].get("median_ms"):
        c["speedup"] = t["reference"]["median_ms"] / t["candidate"]["median_ms"]


def self_test() -> dict[str, Any]:
    """The comparison, the timing and both input drawers on tiny arrays on whatever device is here (the dry run's check
    of the code a device run reaches only after its programs compiled)."""
    tiny = {"inputs": [{"name": "x", "shape": [4, 64], "dtype": "bfloat16", "init": {"kind": "normal", "mean": 0.0, "std": 0.02}},
                       {"name": "y", "shape": [64], "dtype": "float32", "init": {"kind": "uniform", "low": 0.0, "high": 1.0}},
                       {"name": "i", "shape": [3], "dtype": "int32", "init": {"kind": "randint", "low": 0, "high": 7}}]}
    out: dict[str, Any] = {}
    for mode in ("jax", "numpy"):
        xs = build_inputs(tiny, Path("."), mode=mode, seed=0)
        bad = _check_structs(tiny, xs)
        if bad:
            raise AssertionError(f"{mode} inputs: {bad}")
        x = np.asarray(xs[0], np.float32)
        if not (0.005 < float(x.std()) < 0.05) or not (0.0 <= float(np.asarray(xs[1]).min()) and float(np.asarray(xs[1]).max()) < 1.0):
            raise AssertionError(f"{mode} inputs are not drawn from their inits (std {x.std():.3g})")
        out[f"inputs_{mode}"] = "ok"
    f = jax.jit(lambda x, y, i: (x.astype(jnp.float32) * y, jnp.sum(i)))
    g = jax.jit(lambda x, y, i: (x.astype(jnp.float32) * y + 1e-3, jnp.sum(i)))
    ref, same, off = (jax.tree_util.tree_leaves(h(*xs)) for h in (f, f, g))
    good = compare(ref, same, {"atol": 1e-2, "rtol": 1e-2})
    bad = compare(ref, off, {"atol": [1e-4, 0.0], "rtol": 0.0})
    if not good["pass"] or bad["pass"] or bad["outputs"][0]["over"] != 4 * 64:
        raise AssertionError(f"comparison: {good} / {bad}")
    t = time_interleaved({"reference": f, "candidate": g}, xs, warmup=1, iters=4, max_s=5.0)
    if t["rounds"] != 4 or t["reference"]["n"] != 4 or not t["candidate"]["median_ms"] > 0:
        raise AssertionError(f"timing: {t}")
    out.update(compare="ok", timing="ok", speedup_example=t["reference"]["median_ms"] / t["candidate"]["median_ms"])
    return out


# --- the run ------------------------------------------------------------------------------------------------------
def _table(results: dict[str, Any]) -> str:
    rows = [("task", "candidate", "path", "ok", "max_abs", "ref_ms", "cand_ms", "speedup", "pred(full)")]
    for t in results["tasks"]:
        if t.get("error") or t.get("skipped"):
            rows.append((t["task"].split(":")[-1], "-", "-", "-", "-", "-", "-", "-", (t.get("error") or t.get("skipped"))[:60]))
            continue
        for c in t["candidates"]:
            tm = c.get("timing") or {}
            ms = lambda k: f"{tm[k]['median_ms']:.3f}" if tm.get(k, {}).get("median_ms") else "-"  # noqa: E731
            ok = "PASS" if c.get("pass") else ("FAIL" if "pass" in c else "?")
            p = c["predicted"]
            ok_full = p.get("direct_ok") if p.get("direct_ok") is not None else p.get("full_ok")
            pred = "ok" if ok_full else "FAIL" if ok_full is False else "?"
            spill = p.get("direct_spill_bytes") or p.get("full_spill_bytes")
            if spill:
                pred += f" spill{spill}"
            if p.get("status") and p["status"] != "correct":
                pred += f" (ci: {p['status']})"
            why = c.get("skipped") or c.get("source_error") or c.get("error")
            rows.append((t["task"].split(":")[-1], c["name"], c.get("path") or c.get("exported") or c.get("source", "-")[:8],
                         ok if not why else why[:40], f"{c['compare']['max_abs']:.3g}" if c.get("compare", {}).get("max_abs") is not None else "-",
                         ms("reference"), ms("candidate"), f"{c['speedup']:.2f}x" if c.get("speedup") else "-", pred))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(r, widths)) for r in rows)


def run_isolated(task: dict[str, Any], args: argparse.Namespace, started: float) -> dict[str, Any]:
    """One task in a child process running this script (``--exact-task``), with the budget that is left."""
    import tempfile

    left = max(1.0, args.budget_s - (time.perf_counter() - started))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "task.json"
        cmd = [sys.executable, os.path.abspath(__file__), "--manifest", args.manifest, "--out", str(out),
               "--budget-s", f"{left:.0f}", "--inputs", args.inputs, "--seed", str(args.seed), "--warmup", str(args.warmup),
               "--iters", str(args.iters), "--max-timing-s", str(args.max_timing_s), "--exact-task", task["task"]]
        if args.source_only:
            cmd.append("--source-only")
        if args.dry_run:
            cmd.append("--dry-run")
        r = subprocess.run(cmd, capture_output=True, text=True)
        try:
            found = json.loads(out.read_text())["tasks"]
            res = next(t for t in found if t["task"] == task["task"])
        except Exception:  # noqa: BLE001 - the child died before it wrote its task
            res = {"task": task["task"], "error": f"the task's process ended with code {r.returncode} before it wrote its "
                                                  f"result: {r.stderr[-1500:]}"}
        res["process_rc"] = r.returncode
        return res


def _pred_ok(c: dict[str, Any]) -> bool | None:
    p = c.get("predicted") or {}
    return p.get("direct_ok") if p.get("direct_ok") is not None else p.get("full_ok")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="evals/device_run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", default=".device/manifest.json")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT") or ".device", "device_results.json"),
                   help="results JSON (default $OUT/device_results.json, else .device/device_results.json)")
    p.add_argument("--budget-s", type=float, default=420.0, help="start no new task or candidate after this many seconds")
    p.add_argument("--tasks", nargs="*", default=None, help="only tasks whose id contains one of these")
    p.add_argument("--inputs", choices=("jax", "numpy"), default="jax",
                   help="draw floating inputs on the device with jax.random (fast) or on the host with numpy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--max-timing-s", type=float, default=30.0, help="cap on one candidate's timed rounds (fewer rounds)")
    p.add_argument("--source-only", action="store_true",
                   help="skip the exported candidate programs: import each candidate's source and jit it here")
    p.add_argument("--isolate", action="store_true",
                   help="run each task in its own process (a crash in XLA ends only that task; ~5 s more per task)")
    p.add_argument("--exact-task", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true",
                   help="no device: check the manifest, the inputs' shapes, deserialize the programs, lower the sources for cuda")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    _import_jax()
    started = time.perf_counter()
    manifest_path = Path(args.manifest)
    manifest = json.loads(manifest_path.read_text())
    root = manifest_path.parent
    devices = jax.devices()
    results: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]), "dry_run": args.dry_run,
        "jax": jax.__version__, "jaxlib": getattr(__import__("jaxlib"), "__version__", None), "numpy": np.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "backend": jax.default_backend(), "device_kind": devices[0].device_kind if devices else None,
        "devices": [str(d) for d in devices], "nvidia_smi": None if args.dry_run else _nvidia_smi(),
        "manifest": {k: manifest.get(k) for k in ("created", "exported_with", "scale", "authored_at", "predicted_chip",
                                                   "config", "inputs")},
        "inputs_drawn_with": "numpy (host)" if args.inputs == "numpy" else "jax.random (device)", "seed": args.seed,
        "warmup": args.warmup, "iters": args.iters, "budget_s": args.budget_s, "tasks": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        try:
            results["self_test"] = self_test()
        except Exception as exc:  # noqa: BLE001
            results["self_test"] = {"error": _err(exc), "traceback": _tb(exc)}
        print(f"self test: {results['self_test']}", flush=True)

    def save() -> None:
        results["wall_s"] = round(time.perf_counter() - started, 1)
        out.write_text(json.dumps(results, indent=1, default=str) + "\n")

    for task in manifest["tasks"]:
        if args.tasks and not any(s in task["task"] for s in args.tasks):
            continue
        if args.exact_task is not None and task["task"] != args.exact_task:
            continue
        if task.get("skipped"):
            results["tasks"].append({"task": task["task"], "skipped": f"at export: {task['skipped']}"})
            continue
        elapsed = time.perf_counter() - started
        if elapsed > args.budget_s:
            results["tasks"].append({"task": task["task"], "skipped": f"time budget of {args.budget_s:.0f} s spent after {elapsed:.0f} s"})
            continue
        print(f"[{elapsed:6.0f} s] {task['task']} ...", flush=True)
        try:
            res = run_isolated(task, args, started) if args.isolate else run_task(task, root, args, started)
        except Exception as exc:  # noqa: BLE001 - never the whole run
            res = {"task": task["task"], "error": _err(exc), "traceback": _tb(exc)}
        results["tasks"].append(res)
        for c in res.get("candidates", []):
            sp = f"{c['speedup']:.2f}x" if c.get("speedup") else "-"
            state = c.get("skipped") or c.get("source_error") or c.get("error") or c.get("path") or c.get("source") or c.get("exported")
            print(f"    {c['name']}: {state}; pass={c.get('pass')} speedup={sp}"
                  + (f" (exported failed: {c['exported_error'][:150]})" if c.get("exported_error") else ""), flush=True)
        if res.get("error"):
            print(f"    error: {res['error'][:300]}", flush=True)
        if (res.get("reference") or {}).get("error"):
            print(f"    reference error: {res['reference']['error'][:300]}", flush=True)
        save()
    if not args.dry_run:
        results["nvidia_smi_after"] = _nvidia_smi()
    cands = [c for t in results["tasks"] for c in t.get("candidates", [])]
    results["summary"] = {
        "tasks": len(results["tasks"]), "candidates": len(cands),
        "ran_exported": sum(c.get("path") == "exported" for c in cands),
        "ran_source": sum(c.get("path") == "source" for c in cands),
        "passed": sum(bool(c.get("pass")) for c in cands),
        "failed": sum(c.get("pass") is False for c in cands),
        "faster_than_xla": sum((c.get("speedup") or 0) > 1.0 for c in cands),
        "predicted_full_ok_but_failed_here": [f"{t['task']}/{c['name']}" for t in results["tasks"] for c in t.get("candidates", [])
                                              if _pred_ok(c) and not c.get("path") and not c.get("skipped")
                                              and not args.dry_run],
        "predicted_full_fail_but_ran_here": [f"{t['task']}/{c['name']}" for t in results["tasks"] for c in t.get("candidates", [])
                                             if _pred_ok(c) is False and c.get("path")],
    }
    save()
    print(_table(results))
    print(f"wrote {out} in {results['wall_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
