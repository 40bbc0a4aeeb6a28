"""Export mk's offline-author GPU kernels and the XLA references at full scale for a later run on a real GPU.

    python -m evals.device_export                         # the default tasks, into .device/ (about 15-25 min)
    python -m evals.device_export --tasks jaxbench:12p_RMSNorm --no-predict    # quick

Runs here (no GPU needed). For each task the offline author proposes its GPU (Pallas Triton) candidates,
authored on the task restricted to its ``ci`` scale as ``mk optimize --scale ci`` does (the source is
shape-generic: it is exported at ``full`` shapes). For the reference and every proposal, at the task's
``full`` scale, it writes

- ``<task>/reference.exported``, ``<task>/<proposal>.exported``: ``jax.export`` for platform ``cuda``
  (the candidate with its Triton custom calls allowed, as mk's tracer exports it), statics bound as
  the task binds them and the candidate's tunables at their defaults (no config);
- ``<task>/<proposal>.py``: the candidate's source (the device's fallback when the exported Triton
  program does not load under another jaxlib);
- ``<task>/<input>.npy``: inputs with structure (a ``native`` init: labels, group sizes, page tables),
  drawn here by the task's own generator at full scale, seed 0 (the published layout);

and ``manifest.json``: per task the inputs (shape, dtype, how to draw each floating input: the task's
``Init``), statics, tolerance, the reference's output avals, and per proposal the export and the
deviceless compile prediction for an H100 (``mk.harness.evaluate(..., scale="ci", measure=False,
chip="h100")``: status, reason, compile_check and every ``CompileResult``, the ``full`` scale compiled
only). ``evals/device_run.py`` reads it on the GPU machine without mk.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import logging
import math
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("evals.device_export")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / ".device"
DEFAULT_TASKS = (
    "jaxbench:8p_GEMM", "jaxbench:12p_RMSNorm", "jaxbench:13p_Cross_Entropy", "jaxbench:1p_Flash_Attention",
    "jaxbench:9p_SwiGLU_MLP", "jaxbench:10p_Sparse_MoE", "jaxbench:11p_Megablox_GMM", "jaxbench:6p_Paged_Attention",
    "jaxbench:15p_RetNet_Retention", "jaxbench:18k_Conv2D_ReLU_BiasAdd", "jaxbench:19k_Matmul_Subtract_Multiply_ReLU",
    "jaxbench:30k_Matmul_Scaling_ResidualAdd", "jaxbench:41k_Gemm_Add_ReLU", "jaxbench:44k_Matmul_Divide_GELU",
)
SCALE = "full"
AUTHOR_SCALE = "ci"
#: structured inputs saved as .npy only up to this many bytes per task; above it the task is skipped
NPY_LIMIT = 8 << 20
#: one exported program above this is not written (a reference with large constants)
PROGRAM_LIMIT = 8 << 20
#: the whole folder must stay under this
TOTAL_LIMIT = 50 << 20
SEED = 0


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _encode(v: Any) -> Any:
    """A static value as JSON the device script can decode without mk (tuples and dtypes tagged)."""
    import numpy as np

    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple):
        return {"__tuple__": [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _encode(x) for k, x in v.items()}
    try:
        return {"__dtype__": np.dtype(v).name}
    except TypeError:
        raise TypeError(f"static value {v!r} is not JSON-able") from None


@contextlib.contextmanager
def _seen_as_gpu() -> Any:
    """While it is active ``jax.default_backend()`` answers ``gpu`` (mk's tracer does the same without the device):
    a candidate that picks its code by asking is exported on the branch the GPU takes."""
    import jax

    real = jax.default_backend
    jax.default_backend = lambda: "gpu"
    try:
        yield
    finally:
        jax.default_backend = real


def _custom_calls(exported: Any) -> dict[str, int]:
    text = exported.mlir_module()
    found: dict[str, int] = {}
    for m in re.finditer(r"stablehlo\.custom_call\s+@([\w$.\-]+)|call_target_name\s*=\s*\"([^\"]+)\"", text):
        name = m.group(1) or m.group(2)
        found[name] = found.get(name, 0) + 1
    return found


def _avals(avals: Any) -> list[dict[str, Any]]:
    return [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in avals]


def _tolerance(task: Any) -> dict[str, Any]:
    tol = task.tolerance
    as_list = lambda v: [float(x) for x in v] if isinstance(v, tuple) else float(v)  # noqa: E731
    return {"atol": as_list(tol.atol), "rtol": as_list(tol.rtol)}


def _inputs(task: Any, folder: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Each input's description at full scale; structured (``native``) inputs drawn here and saved as .npy.
    Returns (inputs, why the task is skipped or None)."""
    import numpy as np

    shapes = task.shapes(SCALE)
    out = []
    for spec, shape in zip(task.args, shapes):
        init = spec.init
        item = {"name": spec.name, "shape": list(shape), "dtype": spec.dtype, "init": {"kind": init.kind}}
        if init.kind == "normal":
            item["init"].update(mean=init.mean, std=init.std)
        elif init.kind == "uniform":
            item["init"].update(low=init.low, high=init.high)
        elif init.kind == "randint":
            item["init"].update(low=int(init.low), high=int(init.high))
        elif init.kind == "constant":
            item["init"].update(value=init.value)
        elif init.kind in ("outliers", "negative"):
            item["init"].update(mean=init.mean, std=init.std, value=init.value)
        out.append(item)
    native = [i for i, it in enumerate(out) if it["init"]["kind"] == "native"]
    if not native:
        return out, None
    need = sum(math.prod(out[i]["shape"]) * np.dtype(task.arg_structs(SCALE)[i].dtype).itemsize for i in native)
    if need > NPY_LIMIT:
        return out, f"inputs too large: its structured (native) inputs take {need / 2**20:.1f} MiB at full scale (limit {NPY_LIMIT >> 20} MiB)"
    t0 = time.perf_counter()
    drawn = task.make_inputs(SCALE, SEED)  # the task's own generator (all of its arrays; the floats are dropped)
    for i in native:
        arr = np.asarray(drawn[i])
        if tuple(arr.shape) != tuple(out[i]["shape"]):
            return out, f"the generator's {out[i]['name']} has shape {arr.shape}, the spec {out[i]['shape']}"
        name = f"{_safe(out[i]['name'])}.npy"
        np.save(folder / name, arr)
        out[i]["npy"] = name
        out[i]["init"]["seed"] = SEED
        if np.issubdtype(arr.dtype, np.integer) and arr.size:
            out[i]["range"] = [int(arr.min()), int(arr.max())]
    del drawn
    log.info("  structured inputs drawn by the task's generator in %.1f s", time.perf_counter() - t0)
    return out, None


def _write_program(path: Path, data: bytes) -> str | None:
    if len(data) > PROGRAM_LIMIT:
        return f"exported program is {len(data) / 2**20:.1f} MiB (large constants?), over the {PROGRAM_LIMIT >> 20} MiB limit"
    path.write_bytes(data)
    return None


def _load_source(path: Path, entry: str) -> Any:
    mod_name = f"_mk_device_cand_{_safe(path.parent.name)}_{_safe(path.stem)}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return getattr(module, entry)


def _config_defaults(fn: Any, space: dict[str, Any]) -> dict[str, Any]:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {k: _encode(params[k].default) for k in space if k in params and params[k].default is not inspect.Parameter.empty}


def _predict(task: Any, source: str, chip: str, timeouts: dict[str, float]) -> dict[str, Any]:
    from mk.harness import evaluate

    t0 = time.perf_counter()
    try:
        r = evaluate(task, source, target="gpu", scale=AUTHOR_SCALE, measure=False, chip=chip, timeouts=timeouts)
    except Exception as exc:  # noqa: BLE001 - a prediction that fails is recorded, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"[:2000], "seconds": round(time.perf_counter() - t0, 1)}
    full = next((c for c in r.compiled if c.scale == SCALE), None)
    return {
        "chip": chip, "status": r.status, "reason": r.reason[:2000], "compile_check": r.compile_check,
        "full_ok": full.ok if full is not None else None, "full_error": full.error if full is not None else None,
        "full_summary": full.summary() if full is not None else None,
        "full_spill_bytes": full.spill_bytes if full is not None else None,
        "compiled": [c.model_dump() for c in r.compiled], "seconds": round(time.perf_counter() - t0, 1),
    }


def _direct_compile(blob: bytes, chip_name: str) -> dict[str, Any]:
    """The chip's compiler on exactly these exported bytes (the program the device will run), at full scale: what
    ``evaluate`` cannot say when its verdict stops before the compile stage reaches ``full`` (a refused judged scale).
    mk's compile stage (:func:`mk.harness.chipcheck.compile_scales`), the scale declared not judged."""
    from mk.chips import chip_for
    from mk.harness import chipcheck
    from mk.harness.process import default_memory_limit_mb

    t0 = time.perf_counter()
    chip = chip_for("gpu", chip_name)
    why = chipcheck.lowered_only(chip)
    if why:
        return {"skipped": why}
    try:
        results, flags = chipcheck.compile_scales(chip, {SCALE: blob}, set(), memory_mb=default_memory_limit_mb())
    except chipcheck.CompileRefused as exc:
        return {"status": exc.status, "error": exc.reason[:2000], "seconds": round(time.perf_counter() - t0, 1)}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:2000], "seconds": round(time.perf_counter() - t0, 1)}
    r = results[0]
    return {"ok": r.ok, "summary": r.summary(), "spill_bytes": r.spill_bytes, "flags": flags, "compiled": r.model_dump(),
            "seconds": round(time.perf_counter() - t0, 1)}


def export_task(task_id: str, out: Path, *, predict: bool, chip: str, timeouts: dict[str, float],
                deadline: float, compare_all_scales: bool = False) -> dict[str, Any]:
    import jax
    from jax import export

    from mk.author import OfflineAuthor
    from mk.candidate import Candidate
    from mk.harness.tracer import _bind
    from mk.suite import load_builtin
    from mk.targets import get_target

    started = time.perf_counter()
    timings: dict[str, float] = {}
    task = load_builtin(task_id)
    folder = out / _safe(task.name)
    folder.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"task": task_id, "name": task.name, "dir": folder.name, "scale": SCALE}
    if SCALE not in task.scales:
        entry["skipped"] = f"the task has no {SCALE!r} scale"
        return entry

    # --- author (at ci, as `mk optimize --scale ci` does) ---------------------------------------------------------
    t0 = time.perf_counter()
    author_scale = AUTHOR_SCALE if AUTHOR_SCALE in task.scales else task.default_scale
    authored = OfflineAuthor().propose(task.with_scales({author_scale: task.scale(author_scale)}), "gpu")
    timings["author"] = time.perf_counter() - t0
    entry["authored_at"] = author_scale
    entry["declined"] = {k: v[:300] for k, v in authored.declined.items()}
    if not authored.proposals:
        entry["skipped"] = "the offline author made no GPU proposal: " + authored.reason()[:1500]
        entry["timings_s"] = {k: round(v, 2) for k, v in timings.items()}
        return entry
    every: dict[str, str] | None = None
    if compare_all_scales:  # does authoring on every scale (the API's default) write the same sources? (slow: it
        t0 = time.perf_counter()  # probes the reference at full size on the CPU, 1-2 min for some tasks)
        try:
            every = {p.name: p.source for p in OfflineAuthor().propose(task, "gpu").proposals}
        except Exception as exc:  # noqa: BLE001
            every = {"__error__": str(exc)}
        timings["author_all_scales"] = time.perf_counter() - t0

    # --- inputs, statics, tolerance -----------------------------------------------------------------------------
    t0 = time.perf_counter()
    inputs, why = _inputs(task, folder)
    timings["inputs"] = time.perf_counter() - t0
    entry["inputs"] = inputs
    if why:
        entry["skipped"] = why
        entry["timings_s"] = {k: round(v, 2) for k, v in timings.items()}
        return entry
    static = task.static_values(SCALE)
    entry["statics"] = {"names": [s.name for s in task.static], "values": [_encode(v) for v in static],
                        "as_kwargs": task.static_as_kwargs}
    entry["tolerance"] = _tolerance(task)
    structs = task.arg_structs(SCALE)

    # --- the reference ------------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    ref: dict[str, Any] = {"file": None}
    try:
        exp = export.export(jax.jit(task.bind(task.reference, SCALE)), platforms=["cuda"])(*structs)
        data = exp.serialize()
        ref.update(bytes=len(data), out_avals=_avals(exp.out_avals), custom_calls=_custom_calls(exp))
        err = _write_program(folder / "reference.exported", data)
        if err:
            ref["error"] = err
        else:
            ref["file"] = "reference.exported"
            if predict:
                ref["direct_compile"] = _direct_compile(data, chip)
                log.info("  reference: %s", ref["direct_compile"].get("summary") or ref["direct_compile"])
    except Exception as exc:  # noqa: BLE001
        ref["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    timings["export_reference"] = time.perf_counter() - t0
    entry["reference"] = ref
    if ref["file"] is None:
        entry["skipped"] = f"reference not exported: {ref.get('error')}"
        entry["timings_s"] = {k: round(v, 2) for k, v in timings.items()}
        return entry

    # --- the candidates -----------------------------------------------------------------------------------------
    target = get_target("gpu")
    checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(target.kernel_calls)]
    cands = []
    for p in authored.proposals:
        c: dict[str, Any] = {"name": p.name, "template": p.template, "source_file": f"{_safe(p.name)}.py"}
        if every is not None:
            c["same_source_when_authored_on_all_scales"] = every.get(p.name) == p.source
        cand = Candidate.from_source(p.source)
        c["entry"] = cand.entry
        c["config"] = {}  # the tunables at their defaults: what an untuned proposal runs
        c["config_space"] = {k: [_encode(x) for x in v] for k, v in cand.config_space.items()}
        src_path = folder / c["source_file"]
        src_path.write_text(p.source, encoding="utf-8")
        uses = [w for w in ("default_backend", "jax.devices(", "device_kind") if w in p.source]
        if uses:
            c["platform_queries"] = uses  # exported on the GPU branch (_seen_as_gpu); the fallback sees the real GPU
        t0 = time.perf_counter()
        try:
            with _seen_as_gpu():
                fn = _load_source(src_path, cand.entry)
                c["config_defaults"] = _config_defaults(fn, dict(cand.config_space))
                bound = _bind(fn, list(static), task.static_as_kwargs, [s.name for s in task.static], {})
                exp = export.export(jax.jit(bound), platforms=["cuda"], disabled_checks=checks)(*structs)
            data = exp.serialize()
            c.update(bytes=len(data), out_avals=_avals(exp.out_avals), custom_calls=_custom_calls(exp))
            if c["out_avals"] != ref["out_avals"]:
                c["mismatch"] = f"outputs {c['out_avals']} differ from the reference's {ref['out_avals']}"
            err = _write_program(folder / f"{_safe(p.name)}.exported", data)
            c["file"] = None if err else f"{_safe(p.name)}.exported"
            if err:
                c["export_error"] = err
            elif predict:
                c["direct_compile"] = _direct_compile(data, chip)
                log.info("  %s: full-scale compile of the exported program: %s", p.name,
                         c["direct_compile"].get("summary") or c["direct_compile"])
        except Exception as exc:  # noqa: BLE001 - recorded; the device can still try the source
            c["file"], c["export_error"] = None, f"{type(exc).__name__}: {exc}"[:2000]
        c["export_s"] = round(time.perf_counter() - t0, 2)
        log.info("  %s: exported in %.1f s (%s)", p.name, c["export_s"], c.get("export_error") or f"{c.get('bytes')} bytes")
        if predict and time.perf_counter() < deadline:
            c["prediction"] = _predict(task, p.source, chip, timeouts)
            pr = c["prediction"]
            log.info("  %s: predicted in %.0f s: %s; full: %s", p.name, pr["seconds"], pr.get("status") or pr.get("error"),
                     pr.get("full_summary"))
        else:
            c["prediction"] = {"skipped": "export time budget spent" if predict else "--no-predict"}
        cands.append(c)
    entry["candidates"] = cands
    timings["candidates"] = time.perf_counter() - started - sum(timings.values())
    entry["timings_s"] = {k: round(v, 2) for k, v in timings.items()}
    entry["seconds"] = round(time.perf_counter() - started, 1)
    return entry


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _exclude(out: Path) -> None:
    """Keep the export folder out of git (``/.device/`` in .git/info/exclude) when it lives in this repo."""
    try:
        rel = out.resolve().relative_to(ROOT)
    except ValueError:
        return
    git = ROOT / ".git"
    if not git.is_dir():
        return
    excl = git / "info" / "exclude"
    line = f"/{rel.as_posix()}/"
    text = excl.read_text() if excl.exists() else ""
    if line not in text.splitlines():
        excl.parent.mkdir(parents=True, exist_ok=True)
        excl.write_text(text + ("" if not text or text.endswith("\n") else "\n") + line + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.device_export", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--chip", default="h100", help="the chip the deviceless compile prediction is for")
    p.add_argument("--no-predict", action="store_true", help="skip the deviceless compile prediction (mk evaluate)")
    p.add_argument("--budget-s", type=float, default=1500.0,
                   help="after this many seconds the remaining proposals are exported without a prediction")
    p.add_argument("--compare-all-scales", action="store_true",
                   help="also author on every scale and record whether the sources match the ci-authored ones (slow)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("mk.author").setLevel(logging.WARNING)  # one line per declined template otherwise
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # nothing runs on a device here; export for cuda works from the CPU
    import jax

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _exclude(out)
    started = time.perf_counter()
    deadline = started + args.budget_s
    timeouts = {"import_s": 120, "compile_s": 300, "case_s": 300, "timing_s": 60}
    manifest: dict[str, Any] = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m evals.device_export", *sys.argv[1:]]),
        "exported_with": {"jax": jax.__version__, "python": platform.python_version(), "platform": platform.platform()},
        "export_platform": "cuda", "scale": SCALE, "authored_at": AUTHOR_SCALE, "predicted_chip": args.chip,
        "config": "none: every candidate's tunables at their defaults (untuned)",
        "inputs": ("floating inputs: drawn on the device from each input's init (normal: mean + std * N(0,1); uniform: "
                   "[low, high)), fixed seed, cast to the dtype; the task's own distributions, not its exact values. "
                   f"Structured inputs (init 'native'): the task's generator here at {SCALE} scale, seed {SEED} "
                   "(the published layout), saved as .npy"),
        "tasks": [],
    }
    for task_id in args.tasks:
        t0 = time.perf_counter()
        log.info("%s ...", task_id)
        try:
            entry = export_task(task_id, out, predict=not args.no_predict, chip=args.chip, timeouts=timeouts,
                                deadline=deadline, compare_all_scales=args.compare_all_scales)
        except Exception as exc:  # noqa: BLE001 - one task that fails does not end the export
            log.exception("%s failed", task_id)
            entry = {"task": task_id, "skipped": f"export failed: {type(exc).__name__}: {exc}"[:2000]}
        entry.setdefault("seconds", round(time.perf_counter() - t0, 1))
        manifest["tasks"].append(entry)
        log.info("%s done in %.0f s (total %.0f s)%s", task_id, time.perf_counter() - t0, time.perf_counter() - started,
                 f": skipped, {entry['skipped']}" if entry.get("skipped") else "")
        manifest["export_seconds"] = round(time.perf_counter() - started, 1)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")  # after every task
    total = folder_bytes(out)
    manifest["total_bytes"] = total
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    skipped = [(t["task"], t["skipped"]) for t in manifest["tasks"] if t.get("skipped")]
    n = sum(len(t.get("candidates", [])) for t in manifest["tasks"])
    print(f"exported {len(manifest['tasks']) - len(skipped)} tasks, {n} candidates, {total / 2**20:.1f} MiB in {out} "
          f"in {manifest['export_seconds']:.0f} s")
    for tid, why in skipped:
        print(f"  skipped {tid}: {why}")
    if total > TOTAL_LIMIT:
        print(f"error: {out} holds {total / 2**20:.1f} MiB, over the {TOTAL_LIMIT >> 20} MiB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
