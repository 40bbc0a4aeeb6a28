"""The tracer: the only process that imports candidate code (untrusted side of the trust boundary).

Started by the judge inside OS isolation (:mod:`mk.harness.isolation`) as
``python -I -m mk.harness.tracer WORKDIR``. ``WORKDIR`` holds ``spec.json``
(target, entry, config, and per scale the input shapes, dtypes and static
values: never input values) and ``candidate.py``. For each scale the
candidate is traced **once** to a jaxpr; from that one trace it writes

- ``<scale>.target``: ``jax.export`` of the program lowered for the target
  platform (Mosaic/Triton kernels as custom calls): the compile check, and
  the program a device runs;
- ``<scale>.cpu``: the same jaxpr with every ``pallas_call`` in Pallas's HLO
  interpreter, exported for the CPU (no host callbacks, NaN-filled outputs).

Its reply lists facts it saw in the jaxpr (kernels, candidate-set
``interpret``, callbacks, low-precision in-kernel dots). The judge treats all
of it as claims: it analyses the exported target program itself and runs the
CPU form in a process that never imports candidate code. Only a kernel that
the HLO interpreter cannot run (DMAs, semaphores: the TPU interpreter needs
host callbacks, which cannot be exported) is run here, on request, from the
same trace, and the verdict says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mk.harness.poison import GARBAGE, GARBAGE_SHUFFLED

SPEC_FILE = "spec.json"
CANDIDATE_FILE = "candidate.py"

_state: dict[str, Any] = {}


def _setup() -> None:
    """Everything that does not depend on the candidate, done before it is known (a warm spare waits here)."""
    import jax

    # no jax_default_matmul_precision here: the candidate is exported with the precision it states, as it runs in a
    # user's program (a global "highest" would hide a default-precision float32 dot from the precision rule)
    jax.devices()  # initialise backends before the policy closes the file system
    import jax.experimental.pallas  # noqa: F401
    from jax import export  # noqa: F401

    from mk.targets import get_target

    from mk.harness import arrays, dma_order, lowerings, poison, policy, program, races  # noqa: F401  (before the policy closes the file system)

    from mk.targets import Target

    me = sys.modules[__name__]
    trusted = [(program, "with_interpret"), (program, "pallas_eqns"), (program, "walk"), (program, "_in_order"),
               (program, "_with_vmapped_semantics"), (export, "export"), (me, "_programs"), (me, "_tpu_interpreted"),
               (me, "run"), (Target, "interpret_params")]
    if os.environ.get("MK_TARGET") and get_target(os.environ["MK_TARGET"]).kernel_language == "mosaic":  # 0.2 s: only if needed
        import jax.experimental.pallas.tpu  # noqa: F401
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call

        if poison.install():  # mk's fills of the shuffled and garbage check runs (mk/harness/poison.py)
            trusted += poison.installed()
        if dma_order.install():  # which pending DMA a wait completes, varied with the fill (mk/harness/dma_order.py)
            trusted += dma_order.installed()
        if races.install():  # the TPU interpreter's race detector, faster, and its memory model (mk/harness/races.py)
            trusted += races.installed()
            _state["race_state"] = (interpret_pallas_call, "RaceDetectionState", races.RaceState)
    # the functions the tracer calls after the candidate ran, with their code: checked unchanged after the trace (a
    # tripwire: the judge never trusts the tracer's output anyway, but a patched tracer is worth a clear verdict)
    _state["trusted"] = [(mod, name, getattr(mod, name), getattr(mod, name).__code__) for mod, name in trusted]
    # the lowering tables (JAX's and the target's Pallas backend's), checked unchanged before each export
    language = get_target(os.environ["MK_TARGET"]).kernel_language if os.environ.get("MK_TARGET") else None
    _state["lowerings"] = lowerings.snapshot(language if language in lowerings.TABLES else None)


def load(request: dict[str, Any]) -> dict[str, Any]:
    """Import the candidate (after the runtime policy, the first line of defence, is installed)."""
    import importlib.util

    from mk.harness.policy import denied_events, install_sandbox_policy
    from mk.targets import get_target

    workdir = _state["workdir"]
    spec = json.loads((workdir / SPEC_FILE).read_text())
    _state.update(spec=spec, target=get_target(spec["target"]))
    if spec.get("garbage_seed") is not None:  # the judge's secret seed for the garbage fill (before the candidate runs)
        from mk.harness import poison

        poison.seed(int(spec["garbage_seed"]))
    if _state["target"].kernel_language == "mosaic":
        import jax.experimental.pallas.tpu  # noqa: F401  (before the policy closes the file system)
    _seen_as_target(_state["target"])
    t0 = time.perf_counter()
    install_sandbox_policy([str(workdir)])
    mod_spec = importlib.util.spec_from_file_location("candidate", workdir / CANDIDATE_FILE)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules["candidate"] = module
    try:
        with _state["target"].lowering_context(spec.get("chip", "v6e")), _platform_seen():
            mod_spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001
        return _failure("import", exc, denied_events())
    entry = getattr(module, spec["entry"], None)
    if not callable(entry):
        return {"phase": "import", "error": f"the candidate's {spec['entry']!r} is not callable after import"}
    denied = denied_events()
    if denied:
        return {"phase": "import", "rejected": f"the candidate attempted a forbidden operation: {denied[0]}"}
    _state["entry"] = entry
    if spec.get("backward"):  # the judge read a kernel_bwd in the source: it is traced and exported too
        backward = getattr(module, spec["backward"]["entry"], None)
        if not callable(backward):
            return {"phase": "import", "error": f"the candidate's {spec['backward']['entry']!r} is not callable after import"}
        _state["backward"] = backward
    return {"ok": True, "seconds": {"import": time.perf_counter() - t0}}


def _seen_as_target(target: Any) -> None:
    """Without the target's device, ``jax.default_backend()`` answers the target's backend (``tpu``, ``gpu``) for the
    candidate's whole life here: a kernel that picks its code by asking it (honest work on ``cpu``, something else on
    the device) is then judged on the branch the device would take. (JAX itself asks its private copy.) Other ways to
    see the machine remain (an array's ``.devices()``, ``jax.extend.backend``): see docs/judge.md."""
    import functools

    import jax

    if target.host or target.device_present():
        return
    real = jax.default_backend

    @functools.wraps(real)
    def default_backend() -> str:
        return target.device_platform

    jax.default_backend = default_backend
    _state["real_default_backend"] = real
    _state["seen_platform"] = target.device_platform


class _SeenDevice:
    """A device as the candidate's code sees it while it is traced without the target's device: the real one (or the
    assumed TPU chip) in every respect but ``platform``, which is the target's."""

    __slots__ = ("_device", "platform")

    def __init__(self, device: Any, platform: str) -> None:
        self._device, self.platform = device, platform

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def __eq__(self, other: object) -> bool:
        return self._device == (other._device if isinstance(other, _SeenDevice) else other)

    def __hash__(self) -> int:
        return hash(self._device)

    def __repr__(self) -> str:
        return repr(self._device)


@contextlib.contextmanager
def _platform_seen() -> Any:
    """While it is active, ``jax.devices()`` / ``jax.local_devices()`` (no arguments: the default backend) report the
    target's platform (the candidate's import and its traces, kernel bodies included; not the lowering after them)."""
    import jax

    platform = _state.get("seen_platform")
    if platform is None:
        yield
        return

    def wrap(query: Any) -> Any:
        def devices(*args: Any, **kwargs: Any) -> Any:
            found = query(*args, **kwargs)
            return found if args or kwargs else [_SeenDevice(d, platform) for d in found]

        return devices

    real = jax.devices, jax.local_devices
    jax.devices, jax.local_devices = wrap(real[0]), wrap(real[1])
    try:
        yield
    finally:
        jax.devices, jax.local_devices = real


def _as_target(fn: Any) -> Any:
    """``fn`` run under :func:`_platform_seen`."""
    def traced(*args: Any) -> Any:
        with _platform_seen():
            return fn(*args)

    return traced


def trace(request: dict[str, Any]) -> dict[str, Any]:
    """Trace the entry once per scale and export its programs."""
    import jax

    from mk.harness.arrays import decode_static, dtype_of
    from mk.harness.policy import denied_events

    workdir, spec, target, entry = _state["workdir"], _state["spec"], _state["target"], _state["entry"]
    seconds = {}
    scales = {}
    for s in spec["scales"]:
        t1 = time.perf_counter()
        static = decode_static(s["static"])
        structs = [jax.ShapeDtypeStruct(tuple(sh), dtype_of(dt)) for sh, dt in s["structs"]]
        fn = _as_target(_bind(entry, static, spec["static_as_kwargs"], spec["static_names"], spec.get("config") or {}))
        try:
            with target.lowering_context(spec.get("chip", "v6e")):
                scales[s["name"]] = _programs(workdir, s["name"], fn, structs, target, bool(s.get("compile_only")))
                if "backward" in _state and not s.get("compile_only"):
                    scales[s["name"]]["backward"] = _backward_programs(workdir, s, static, structs, target)
        except BaseException as exc:  # noqa: BLE001
            tampered = _tampered()  # a patched tracer that then fails is the patch's verdict, not the failure's
            if tampered:
                return tampered
            if s.get("compile_only") and isinstance(exc, Exception):  # a scale the cases do not run: not claimed
                scales[s["name"]] = {"compile_only_error": _failure("compile", exc, (), scale=s["name"]).get("error", "")}
                continue
            if s.get("optional") and isinstance(exc, Exception) and not denied_events():  # held-out or fresh: the
                scales[s["name"]] = {"build_error": _failure("compile", exc, (), scale=s["name"]).get("error", "")}
                continue  # judge narrows the verdict to the sizes that were built (evaluate._narrow)
            return _failure("compile", exc, denied_events(), scale=s["name"])
        seconds[f"compile:{s['name']}"] = time.perf_counter() - t1
    denied = denied_events()
    if denied:
        return {"phase": "compile", "rejected": f"the candidate attempted a forbidden operation: {denied[0]}"}
    return _tampered() or {"ok": True, "scales": scales, "seconds": seconds}


def _lowerings_changed() -> bool:
    """Whether a lowering table differs from its state before the candidate ran (the first finding is kept)."""
    from mk.harness import lowerings

    if "lowering_change" not in _state and "lowerings" in _state:
        found = lowerings.changed(_state["lowerings"])
        if found:
            _state["lowering_change"] = found
    return "lowering_change" in _state


class _Tampered(Exception):
    """Raised before an export that would lower through tables the candidate changed (:func:`_tampered` says so)."""


def _tampered() -> dict[str, Any] | None:
    """The rejection when the candidate replaced or rewrote one of the tracer's own functions, else None."""
    for mod, name, fn, code in _state["trusted"]:
        if getattr(mod, name, None) is not fn or fn.__code__ is not code:
            return {"phase": "compile", "rejected": f"the candidate modified the judge's tracer ({mod.__name__}.{name})"}
    if _lowerings_changed():
        return {"phase": "compile", "rejected": f"the candidate changed how programs are lowered ({_state['lowering_change']}): "
                                                "the program the cases check would not be the one the device runs"}
    if "race_state" in _state:  # the TPU interpreter still builds the judge's race detector
        mod, name, cls = _state["race_state"]
        if getattr(mod, name, None) is not cls:
            return {"phase": "compile", "rejected": f"the candidate modified the judge's tracer ({mod.__name__}.{name})"}
    return None


#: the TPU-interpreter runs of a program whose cases the HLO interpreter runs (NaN in unwritten memory, the grid in
#: order), each with race detection: ``ordered`` looks like the cases to a kernel (NaN, in order), so a kernel
#: cannot race only where no race is looked for; ``shuffled`` and ``garbage`` visit "parallel" axes out of order (on
#: one core: the interpreter's two-core mode reported a race in upstream splash attention, a false positive) and
#: fill unwritten memory from two different secret families (:mod:`mk.harness.poison`: uniform, normal, random bits
#: or zeros), as stale memory on a chip holds something, so a kernel honest only when it finds NaN, or one family,
#: disagrees with itself. Both shuffle: with one run in order, a kernel honest only on one family hid a race along a
#: parallel axis whenever the shuffled run drew that family (stop 32's CI: ``r11_rt_c_zero_sniff_parallel_k``, zeros,
#: 1 in 4); now the run that draws any other family visits the axis out of order.
#: Each run: (poison, in order)
CHECKS = {"ordered": ("nan", True), "shuffled": (GARBAGE_SHUFFLED, False), "garbage": (GARBAGE, False)}


def _tpu_interpreted(closed: Any, target: Any, seed: int, check: bool) -> dict[str, Any]:
    """``closed`` rewritten for the TPU interpreter: the runs of :data:`CHECKS` and, for a program without a CPU form
    (``check`` False: the TPU interpreter runs every case), ``cases`` too: NaN, "parallel" axes shuffled (stop 33: a
    program the HLO interpreter cannot run, from one ``prng_seed``, once had only NaN runs, so none of the fill runs'
    checks applied to it). ``seed``: the interpreter's ``random_seed``, the judge's choice from the kernels' parallel
    axes (:func:`mk.harness.program.check_seed`), sent with each run."""
    from mk.harness import program

    runs = {name: program.with_interpret(closed, target.interpret_params(seed=seed, poison=poison), in_order=in_order)
            for name, (poison, in_order) in CHECKS.items()}
    if not check:
        runs["cases"] = program.with_interpret(closed, target.interpret_params(seed=seed, poison="nan"))
    return runs


class _Interpreted:
    """One trace's TPU-interpreter runs, built (and jitted) when the judge first asks for one, with the seed it sends."""

    def __init__(self, closed: Any, target: Any, check: bool, as_fun: Any) -> None:
        self.closed, self.target, self.check, self.as_fun = closed, target, check, as_fun
        self.built: dict[int, dict[str, Any]] = {}

    def runs(self, seed: int) -> dict[str, Any]:
        if seed not in self.built:
            runs = _tpu_interpreted(self.closed, self.target, seed, self.check)
            self.built[seed] = {k: self.as_fun(c) for k, c in runs.items()}
        return self.built[seed]


def _facts(closed: Any, target: Any) -> dict[str, Any]:
    """What the judge reads from one traced jaxpr (claims: they can only add reasons to reject), for the forward and
    the backward alike."""
    from mk.harness import program

    return {
        "kernels": [program.kernel_label(e) for e in program.pallas_eqns(closed.jaxpr)],
        "candidate_interpret": program.candidate_interpret(closed.jaxpr),
        "callbacks": program.callbacks(closed.jaxpr),
        "low_precision_dots": program.low_precision_kernel_dots(closed.jaxpr),
        "grid_steps": _grid_steps(closed.jaxpr),
        "parallel_axes": [list(a) for a in program.parallel_axes(closed.jaxpr)] if target.interpreter == "tpu" else [],
        "async_kernels": program.async_kernels(closed.jaxpr),
        "dma_races": program.dma_write_races(closed.jaxpr),
        "platform_dependent": program.platform_dependent(closed.jaxpr),
        "shared_output_blocks": program.shared_output_blocks(closed.jaxpr) if target.kernel_language == "triton" else [],
    }


def _programs(workdir: Path, scale: str, fn: Any, structs: list[Any], target: Any, compile_only: bool = False
              ) -> dict[str, Any]:
    """Export the scale's programs: the target's (for the device and the chip's compiler) and the CPU form (the
    cases run it; at a ``compile_only`` scale, a declared scale the cases do not run, the judge only reads it)."""
    import jax
    from jax import export
    from jax.extend import core as jcore

    from mk.harness import program

    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*structs)  # the one trace of this scale
    if _lowerings_changed():  # checked after the candidate's code ran, before anything is lowered
        raise _Tampered(_state["lowering_change"])
    out_tree = jax.tree_util.tree_structure(shapes)
    facts = _facts(closed, target)
    if facts["callbacks"]:
        return {**facts, "target_file": None, "cpu_file": None}

    def as_fun(c: Any) -> Any:
        flat = jcore.jaxpr_as_fun(c)
        return jax.jit(lambda *a: jax.tree_util.tree_unflatten(out_tree, flat(*a)))

    cpu_file = f"{scale}.cpu"
    cpu_error = None
    try:  # at a compile-only scale too: the judge compares its code with the judged sizes' (it never runs it)
        cpu = export.export(as_fun(program.with_interpret(closed, True)), platforms=["cpu"])(*structs)
        (workdir / cpu_file).write_bytes(cpu.serialize())
    except Exception as exc:  # noqa: BLE001 - e.g. a DMA kernel the HLO interpreter cannot run
        cpu_file, cpu_error = None, f"{type(exc).__name__}: {_first_line(exc)}"
    if target.host:
        target_file = cpu_file
    else:
        target_file = f"{scale}.target"
        # the target's own kernels are allowed custom calls (jax.export only trusts a fixed list by default); the judge
        # reads every custom call in the module and refuses any other
        checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(target.kernel_calls)]
        exported = export.export(as_fun(closed), platforms=[target.platform], disabled_checks=checks)(*structs)
        (workdir / target_file).write_bytes(exported.serialize())
    if not compile_only and (cpu_file is None or (target.interpreter == "tpu" and facts["kernels"])):  # the TPU interpreter: fallback, cross-check
        _state.setdefault("fallback", {})[scale] = (_Interpreted(closed, target, cpu_file is not None, as_fun), out_tree)
    return {**facts, "target_file": target_file, "cpu_file": cpu_file, "cpu_error": cpu_error}


def _backward_programs(workdir: Path, s: dict[str, Any], static: list[Any], structs: list[Any], target: Any) -> dict[str, Any]:
    """The candidate's backward at one scale, traced once with the output cotangent as extra inputs (one per output
    leaf, after the kernel's inputs) and exported like the forward: its floating gradients, in input order."""
    import jax
    from jax import export
    from jax.extend import core as jcore

    from mk.harness import program
    from mk.harness.arrays import dtype_of

    spec = _state["spec"]
    grads = list(spec["backward"]["grads"])
    cts = [jax.ShapeDtypeStruct(tuple(sh), dtype_of(dt)) for sh, dt in spec["backward"]["outputs"][s["name"]]]
    n = len(structs)
    bwd = _state["backward"]
    if spec["static_as_kwargs"]:
        kw = dict(zip(spec["static_names"], static))
        call = lambda ct, dyn: bwd(ct, *dyn, **kw)  # noqa: E731
    else:
        call = lambda ct, dyn: bwd(ct, *dyn, *static)  # noqa: E731

    def fn(*a: Any) -> Any:
        dyn, leaves = a[:n], a[n:]
        out = call(leaves[0] if len(leaves) == 1 else tuple(leaves), dyn)
        out = list(out)
        if len(out) != n:
            raise ValueError(f"kernel_bwd returned {len(out)} cotangents for {n} inputs")
        if any(out[i] is None for i in grads):
            raise ValueError("kernel_bwd returned None for a floating input (None is for integer inputs only)")
        return [out[i] for i in grads]

    try:
        closed = jax.make_jaxpr(_as_target(fn))(*structs, *cts)
    except Exception as exc:  # noqa: BLE001 - reported; the judge refuses the candidate
        return {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
    if _lowerings_changed():
        raise _Tampered(_state["lowering_change"])
    name = s["name"]
    flat = jcore.jaxpr_as_fun
    out: dict[str, Any] = _facts(closed, target)
    if out["callbacks"]:
        return {**out, "error": f"host callback in the backward ({out['callbacks'][0]})"}
    args = [*structs, *cts]
    try:
        cpu = export.export(jax.jit(flat(program.with_interpret(closed, True))), platforms=["cpu"])(*args)
        (workdir / f"{name}.bwd.cpu").write_bytes(cpu.serialize())
        out["cpu_file"] = f"{name}.bwd.cpu"
    except Exception as exc:  # noqa: BLE001
        out["cpu_file"], out["cpu_error"] = None, f"{type(exc).__name__}: {_first_line(exc)}"
    if target.interpreter == "tpu" and out["kernels"]:  # the TPU interpreter's race check, as for the forward
        _state.setdefault("fallback_bwd", {})[name] = _Interpreted(closed, target, out["cpu_file"] is not None,
                                                                   lambda c: jax.jit(flat(c)))
    if target.host:
        out["target_file"] = out["cpu_file"]
    else:
        checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(target.kernel_calls)]
        try:
            exported = export.export(jax.jit(flat(closed)), platforms=[target.platform], disabled_checks=checks)(*args)
        except Exception as exc:  # noqa: BLE001
            return {**out, "error": f"{type(exc).__name__}: {_first_line(exc)}"}
        (workdir / f"{name}.bwd.target").write_bytes(exported.serialize())
        out["target_file"] = f"{name}.bwd.target"
    return out


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Fallback only: run the TPU-interpreted program of ``scale`` (same trace) on the inputs in ``dir``: the
    forward's, or with ``part: "bwd"`` the backward's (inputs, then the cotangents)."""
    import jax
    import numpy as np

    from mk.harness.arrays import load_arrays, save_arrays

    target = _state["target"]
    seed = int(request["seed"])  # the judge's choice (mk.harness.program.check_seed)
    interpreted = _state["fallback_bwd"][request["scale"]] if request.get("part") == "bwd" else \
        _state["fallback"][request["scale"]][0]
    if seed not in interpreted.built:  # the runs are built now, after the candidate's code ran: the tripwires first
        tampered = _tampered()
        if tampered:
            return tampered
    runs = interpreted.runs(seed)
    fn = runs.get(request.get("run", "cases")) or runs["cases"]  # a check of a program with no CPU form: its cases' run
    folder = _state["workdir"] / request["dir"]
    inputs = load_arrays(folder, "in")
    from mk.harness import races

    races.start()  # the findings of every kernel this run interprets
    with target.lowering_context(_state["spec"].get("chip", "v6e")):
        out = jax.block_until_ready(fn(*[jax.device_put(x) for x in inputs]))
    save_arrays(folder, "out", [np.asarray(x) for x in jax.tree_util.tree_leaves(out)])
    return {"ok": True, "races": target.races_found(), "unwritten": target.unwritten_read()}


def _grid_steps(jaxpr: Any) -> int:
    from mk.harness import program

    steps = 0
    for eqn in program.pallas_eqns(jaxpr):
        grid = getattr(eqn.params.get("grid_mapping"), "grid", ()) or ()
        n = 1
        for g in grid:
            n *= int(g) if isinstance(g, int) else 1
        steps += n
    return steps


def _bind(entry: Any, static: list[Any], as_kwargs: bool, names: list[str], config: dict[str, Any]) -> Any:
    if as_kwargs:
        kw = dict(zip(names, static), **config)
        return lambda *dyn: entry(*dyn, **kw)
    return lambda *dyn: entry(*dyn, *static, **config)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [""])[0][:500]


def _failure(phase: str, exc: BaseException, denied: tuple[str, ...], scale: str | None = None) -> dict[str, Any]:
    import traceback

    if denied:
        return {"phase": phase, "rejected": f"the candidate attempted a forbidden operation: {denied[0]}"}
    stack = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in stack if f.filename.endswith(CANDIDATE_FILE)]
    where = f" (candidate.py line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    text = f"{type(exc).__name__}: {exc}".strip()
    # who raised it: the candidate's own code (its words prove nothing about the machine) or JAX/jaxlib
    origin = "candidate" if not stack or stack[-1].filename.endswith(CANDIDATE_FILE) else "library"
    own = [f"candidate.py line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames]
    return {"phase": phase, "scale": scale, "error": text[:6000], "error_type": type(exc).__name__, "where": where,
            "origin": origin, "frames": own[-12:]}


def main(argv: list[str] | None = None) -> int:
    from mk.harness.process import serve

    args = sys.argv[1:] if argv is None else argv
    _state["workdir"] = Path(args[0] if args else os.getcwd()).resolve()
    _setup()
    serve({"load": load, "trace": trace, "run": run})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip atexit hooks and threads a candidate may have left behind


if __name__ == "__main__":
    main()
