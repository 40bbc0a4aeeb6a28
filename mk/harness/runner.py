"""The runner: executes exported programs for the judge (trusted side of the trust boundary).

Started as ``python -I -m mk.harness.runner WORKDIR``. It never imports
candidate code: it deserializes programs (``jax.export`` artifacts, StableHLO
only) that the judge has already checked for host callbacks and foreign
custom calls, runs them on inputs the judge wrote, and writes the raw
outputs and raw timing samples back as files. It runs in its own process so
that a program that hangs or exhausts memory is killed without taking the
judge down; the judge compares and decides.

Requests (JSON lines, see :func:`mk.harness.process.serve`):
``load`` (the programs of each scale and the reference), ``case`` (run one
case), ``ablate`` (the judge's own variants of the target program with
kernels replaced by constants: does each kernel change the result, and how
much of the reference's work runs outside kernels) and ``time`` (candidate
and reference interleaved on the device).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

_clock = time.perf_counter
_state: dict[str, Any] = {"programs": {}, "reference": {}, "jitted": {}}


def load(request: dict[str, Any]) -> dict[str, Any]:
    import jax
    from jax import export

    jax.config.update("jax_default_matmul_precision", "highest")
    workdir = _state["workdir"]
    for table in ("programs", "reference", "jitted"):  # a warm runner serves one evaluation after another
        _state[table] = {}
    jax.clear_caches()  # compiled executables (and their constants) of the previous evaluation
    for scale, files in request["programs"].items():
        _state["programs"][scale] = {form: export.deserialize(bytearray((workdir / path).read_bytes()))
                                     for form, path in files.items() if path}
    for scale, path in (request.get("reference") or {}).items():
        _state["reference"][scale] = export.deserialize(bytearray((workdir / path).read_bytes()))
    _state["on_device"] = bool(request.get("on_device"))
    return {"ok": True, "devices": [d.platform for d in jax.devices()]}


def _program(scale: str, form: str) -> Any:
    import jax

    key = (scale, form)
    if key not in _state["jitted"]:
        _state["jitted"][key] = jax.jit(_state["programs"][scale][form].call)
    return _state["jitted"][key]


def case(request: dict[str, Any]) -> dict[str, Any]:
    import jax
    import numpy as np

    from mk.harness.arrays import load_arrays, save_arrays

    folder = _state["workdir"] / request["dir"]
    inputs = load_arrays(folder, "in")
    fn = _program(request["scale"], request["form"])
    t0 = _clock()
    out = jax.block_until_ready(fn(*[jax.device_put(x) for x in inputs]))
    seconds = _clock() - t0
    save_arrays(folder, "out", [np.asarray(x) for x in jax.tree_util.tree_leaves(out)])
    return {"ok": True, "seconds": seconds}


def ablate(request: dict[str, Any]) -> dict[str, Any]:
    """Per kernel: does replacing its outputs by NaN, or by an iota (the others by ones), change the program's
    result, compared with all kernels replaced by ones? (NaN shows through arithmetic; an iota through argmax,
    compares and casts, where a constant would not.) And the XLA cost of the program with every kernel removed
    (the work that runs outside kernels) next to the reference's."""
    import jax
    import numpy as np

    from mk.harness import program
    from mk.harness.arrays import load_arrays

    form = request.get("form", "target")  # "bwd_target": a written backward's program (mk/harness/gradient.py)
    target = _state["programs"][request["scale"]][form]
    n = int(request["kernels"])
    inputs = load_arrays(_state["workdir"] / request["dir"], "in")
    cpu = jax.devices("cpu")[0]
    args = [jax.device_put(x, cpu) for x in inputs]

    def leaves(fills: list[float | None]) -> list[np.ndarray]:
        exp = program.ablated(target, fills)
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(exp.call)(*args))]

    base = leaves([1.0] * n)
    changed = []
    for k in range(n):
        moved = False
        for fill in (None, "iota"):
            got = leaves([fill if i == k else 1.0 for i in range(n)])
            if any(not _same(a, b) for a, b in zip(base, got)):
                moved = True
                break
        changed.append(moved)
    # a kernel whose results feed a kernel that does work is part of a pipeline, not dead: its consumer was
    # replaced by a constant above, so its own effect cannot show in the result (mk.harness.program.kernel_feeds)
    feeds = program.kernel_feeds(target)
    grew = True
    while grew:
        grew = False
        for k in range(n):
            if not changed[k] and any(changed[j] for j in feeds[k]):
                changed[k] = grew = True
    work = program.work(program.ablated(target, [None] * n, keep_operands=True))
    outside = work.flops
    ref = _state["reference"].get(request["scale"]) if form == "target" else None
    return {"ok": True, "changed": changed, "outside_flops": outside, "outside_unknown_loops": work.unknown_loops,
            "reference_flops": program.flops(ref) if ref else None}


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc" or "float" in a.dtype.name:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return bool(np.array_equal(a64, b64, equal_nan=True))
    return bool(np.array_equal(a, b))


def time_runs(request: dict[str, Any]) -> dict[str, Any]:
    import jax
    import numpy as np

    from mk.harness.arrays import load_arrays, save_arrays
    from mk.harness.timing import interleaved_runs

    workdir = _state["workdir"]
    scale, opts = request["scale"], request["opts"]
    cand = _program(scale, request["form"])
    ref = jax.jit(_state["reference"][scale].call)
    sets = [[jax.device_put(x) for x in load_arrays(workdir / d, "in")] for d in request["dirs"]]
    kept: dict[int, Any] = {}
    c, r = interleaved_runs(jax.block_until_ready, cand, ref, sets, _clock, opts, keep=kept)
    for k, out in kept.items():
        save_arrays(workdir / request["dirs"][k], "out", [np.asarray(x) for x in jax.tree_util.tree_leaves(out)])
    return {"ok": True, "candidate": list(map(float, c)), "reference": list(map(float, r))}


def cost(request: dict[str, Any]) -> dict[str, Any]:
    import jax

    exp = _state["programs"][request["scale"]][request["form"]]
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exp.in_avals]
    analysis = jax.jit(exp.call).lower(*structs).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis or {}
    return {"ok": True, "flops": float(analysis.get("flops", -1.0)), "bytes": float(analysis.get("bytes accessed", -1.0))}


def main(argv: list[str] | None = None) -> int:
    from mk.harness.process import serve

    args = sys.argv[1:] if argv is None else argv
    _state["workdir"] = Path(args[0] if args else os.getcwd()).resolve()
    import jax

    jax.devices()
    serve({"load": load, "case": case, "ablate": ablate, "time": time_runs, "cost": cost})
    os._exit(0)


if __name__ == "__main__":
    main()
