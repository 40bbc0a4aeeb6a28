"""The judge's gradient check: a candidate's written backward (``kernel_bwd``) against the reference's VJP.

A written kernel may carry its backward: a top-level ``def kernel_bwd(cotangent, <the kernel's own arguments>)``
returning one cotangent per array input of ``kernel`` (None for an integer input), the contract
``mk.api.OptimizedFunction`` uses in its ``custom_vjp`` (docs/components.md). The judge decides from the
source it holds (:func:`declares_backward`, trusted) that there is one; the tracer (untrusted) then traces it once
per scale at abstract shapes, with the output cotangent as an input, and exports it like the forward (a target
program and a CPU form with every ``pallas_call`` interpreted). Here (trusted side):

* :func:`check_programs` reads those programs as the forward's are read (no foreign custom calls, no custom calls in
  the CPU form, a kernel present when Pallas is required; one gradient per floating input with that input's shape
  and dtype) and hands them to the runner;
* :func:`check` runs, for every scale of the evaluation (held-out and fresh sizes included), one case on fresh
  inputs and a fresh random cotangent (both from a secret seed), in the runner, and compares each gradient with
  ``jax.vjp`` of the reference computed here: within ``GRAD_TOL`` of the largest reference gradient (the task's own
  tolerance where looser), against the reference at the task's dtypes or, for 16-bit inputs, the same reference
  run in float32 (a backward that keeps f32 statistics is closer to that one).

A candidate whose backward is wrong is ``incorrect``; one whose backward cannot be traced or exported fails the
compile check. The forward is judged exactly as before.
"""

from __future__ import annotations

import ast
import secrets
import shutil
from typing import Any

import numpy as np

from mk.harness import program
from mk.harness.judging import (CHECK_RUNS, EPILOGUE_OPS_PER_OUTPUT, OUTSIDE_SHARE_FLAG, OUTSIDE_SHARE_REJECT,
                                _last_line, _read_regular, _rel, _Verdict, _write_inputs, ask_outputs, case_limit,
                                check_facts, check_note, check_precision)
from mk.task import zero_rows

#: the optional entry of a written file that computes the kernel's backward
BACKWARD_ENTRY = "kernel_bwd"
#: the largest gradient error allowed, relative to the largest reference gradient of that input (per input)
GRAD_TOL = {"low": 2e-2, "f32": 1e-3}
#: the elementwise bound (a, r): |d - r| <= a * max|ref| + r * |ref| at every finite reference entry (per input);
#: measured on honest backwards (docs/judge.md, "Backward kernels")
GRAD_ELEM = {"low": (4e-3, 2e-2), "f32": (1e-4, 1e-3)}
#: the 16-bit yardstick rule's factors (worst, RMS): a gradient the bounds refuse still passes when, against the VJP
#: of the reference run in float32, its errors are within these multiples of the 16-bit reference VJP's own. Measured
#: on the written flash-attention backward (bf16, 50 fresh cases, docs/judge.md): worst at most 1.35x, RMS at most
#: 1.0x the reference's own (far below it on large magnitudes, where the bf16 reference's own worst is ~1e4)
LOW_FACTORS = (2.0, 1.5)


def declares_backward(source: str) -> bool:
    """Whether ``source`` defines ``kernel_bwd`` at its top level (a ``def``, or a plain assignment to the name)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == BACKWARD_ENTRY:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == BACKWARD_ENTRY for t in node.targets):
            return True
    return False


def differentiable(task: Any) -> list[int]:
    """The indices of the task's floating inputs (those the backward must return a gradient for)."""
    import jax.numpy as jnp

    from mk.task import np_dtype

    return [i for i, a in enumerate(task.args) if jnp.issubdtype(np_dtype(a.dtype), jnp.inexact)]


def spec_fields(run: Any) -> dict[str, Any]:
    """What the tracer's spec gains when the candidate declares a backward: the entry's name and, per scale, the
    reference's output shapes (the cotangent's)."""
    import jax

    if not declares_backward(run.cand.source):
        return {}
    outs = {}
    for name in run.scales:
        leaves = jax.tree_util.tree_leaves(run.task.output_structs(name))
        outs[name] = [[list(o.shape), np.dtype(o.dtype).name] for o in leaves]
    return {"backward": {"entry": BACKWARD_ENTRY, "outputs": outs, "grads": differentiable(run.task)}}


def check_programs(run: Any, copied: dict[str, dict[str, str]]) -> None:
    """Read each scale's exported backward programs (rules as for the forward) and add them to ``copied`` (the runner's
    load request) as forms ``bwd_target`` and ``bwd_cpu``."""
    from jax import export

    from mk.harness import program

    if not declares_backward(run.cand.source):
        return
    want = differentiable(run.task)
    part = f" in the backward ({BACKWARD_ENTRY})"
    for scale in run.scales:
        facts = run.programs[scale].get("backward")
        if not isinstance(facts, dict):
            raise _Verdict("compile_error", f"the candidate defines {BACKWARD_ENTRY} but no backward program was exported at "
                                            f"scale {scale}")
        if facts.get("error"):
            raise _Verdict("compile_error", f"the candidate's {BACKWARD_ENTRY} failed the {run.target.name} compile check at "
                                            f"scale {scale}: {str(facts['error'])[:600]}")
        check_facts(run, scale, facts, part)  # the forward's rules on the backward's trace
        exported = {}
        for form in ("target", "cpu"):
            name = facts.get(f"{form}_file")
            if form == "cpu" and name is None and (run.on_device or run.target.host):
                continue
            if not isinstance(name, str) or "/" in name or name.startswith("."):
                raise _Verdict("compile_error", f"no {form} program of {BACKWARD_ENTRY} at scale {scale} "
                                                f"({facts.get('cpu_error') or 'not exported'})")
            try:
                exported[form] = export.deserialize(bytearray(_read_regular(run.tracer.workdir / name)))
            except _Verdict:
                raise
            except Exception as exc:  # noqa: BLE001 - the tracer's file, not mk's bug
                raise _Verdict("crashed", f"the tracer's backward {form} program at scale {scale} is not a readable "
                                          f"jax.export artifact ({type(exc).__name__})") from None
        sites = program.custom_calls(exported["target"].mlir_module())
        foreign = program.foreign_calls(sites, run.target.name)
        if foreign:
            raise _Verdict("rejected", f"the backward calls custom code {foreign[0].target!r} at scale {scale}: only "
                                       f"{run.target.name} kernels may appear as custom calls")
        if "cpu" in exported and program.custom_calls(exported["cpu"].mlir_module()):
            raise _Verdict("rejected", f"the CPU form of the backward contains custom calls at scale {scale}")
        if run.require_pallas and not program.kernel_calls(sites, run.target.name):
            raise _Verdict("rejected", f"no pallas_call kernel in the backward ({BACKWARD_ENTRY}) lowered for "
                                       f"{run.target.name} at scale {scale}: a written backward must be a kernel (leave "
                                       f"{BACKWARD_ENTRY} out to use the reference's VJP)")
        structs = run.task.arg_structs(scale)
        avals = exported["target"].out_avals
        if len(avals) != len(want):
            raise _Verdict("incorrect", f"{BACKWARD_ENTRY} returns {len(avals)} gradient array(s) at scale {scale}; the "
                                        f"task has {len(want)} floating input(s), each needs one (None only for integer "
                                        "inputs)")
        for i, aval in zip(want, avals):
            s = structs[i]
            if tuple(aval.shape) != tuple(s.shape) or np.dtype(aval.dtype) != np.dtype(s.dtype):
                raise _Verdict("incorrect", f"{BACKWARD_ENTRY}'s gradient of {run.task.args[i].name} at scale {scale} is "
                                            f"{np.dtype(aval.dtype).name}{list(aval.shape)}, the input is "
                                            f"{np.dtype(s.dtype).name}{list(s.shape)}")
        check_precision(run, scale, facts, exported["target"], part)
        facts["kernel_calls"] = len(program.kernel_calls(sites, run.target.name))
        for form in exported:
            dest = run.rdir / f"{scale}.bwd_{form}.export"
            dest.write_bytes(_read_regular(run.tracer.workdir / facts[f"{form}_file"]))
            copied.setdefault(scale, {})[f"bwd_{form}"] = _rel(run.runner, dest)


#: reference VJP FLOPs by (task fingerprint, argument shapes and dtypes, static values): one export per judged
#: size in a judge process, however many candidates it judges (a search judges many against the same task)
_VJP_FLOPS: dict[tuple[str, str, str], float | None] = {}


def reference_vjp_flops(task: Any, scale: str) -> float | None:
    """The operations of the reference's VJP at ``scale`` (its forward and pullback in one program, counted like
    the forward's reference: :func:`mk.harness.program.work`); None when it cannot be exported here. Cached per
    task and size (a fresh size drawn under a reused scale name has other shapes, so another key)."""
    key = (task.fingerprint(), repr([(s.shape, str(s.dtype)) for s in task.arg_structs(scale)]),
           repr(task.static_values(scale)))
    if key not in _VJP_FLOPS:
        _VJP_FLOPS[key] = _reference_vjp_flops(task, scale)
    return _VJP_FLOPS[key]


def _reference_vjp_flops(task: Any, scale: str) -> float | None:
    import jax
    from jax import export

    from mk.harness import program

    want = differentiable(task)
    structs = task.arg_structs(scale)
    ref = task.bind(task.reference, scale)
    outs = jax.tree_util.tree_leaves(task.output_structs(scale))

    def vjp(*args: Any) -> Any:
        xs, cts = list(args[:len(structs)]), list(args[len(structs):])

        def f(*floats: Any) -> Any:
            ys = list(xs)
            for i, v in zip(want, floats):
                ys[i] = v
            return ref(*ys)

        out, pullback = jax.vjp(f, *[xs[i] for i in want])
        return pullback(jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out), cts))

    try:
        with jax.default_matmul_precision("highest"):
            exp = export.export(jax.jit(vjp), platforms=["cpu"])(*structs, *outs)
        return program.flops(exp)
    except Exception:  # noqa: BLE001 - the share check is skipped (and said so), the dead-kernel check still runs
        return None


def ablate(run: Any) -> str:
    """Rule 15 for the backward: every kernel of the written backward must change its gradients when its outputs
    are replaced (NaN, or an iota), and the reference VJP's work must run inside kernels, with the forward's
    thresholds (the backward program with every kernel removed, next to the reference's VJP). Raises the verdict;
    returns a note for the reason ("" when nothing is worth saying)."""

    if run.target.host or not declares_backward(run.cand.source):
        return ""
    import jax

    notes = []
    for scale in run.suite.scales:
        n = int((run.programs[scale].get("backward") or {}).get("kernel_calls") or 0)
        if not n:
            continue
        case = run.suite.for_scale(scale)[0]
        outs = jax.tree_util.tree_leaves(run.task.output_structs(scale))
        ct = cotangents(np.random.default_rng(secrets.randbelow(2**63)), outs)[0][1]
        folder = _write_inputs(run, "bwd_ablate_" + scale, [*run.suite.inputs(run.task, case), *ct])
        what = f"the backward's kernel ablation at scale {scale}"
        reply = run.runner.ask({"op": "ablate", "scale": scale, "dir": _rel(run.runner, folder), "kernels": n,
                                "form": "bwd_target"}, run.timeouts.compile_s + run.timeouts.case_s * (n + 2), what)
        shutil.rmtree(folder, ignore_errors=True)
        if not reply.get("ok"):
            raise _Verdict("unverifiable_here", f"{what} could not run here ({_last_line(str(reply.get('error')))}), so "
                                                f"the judge cannot show that the backward's kernels do the work")
        dead = [k for k, changed in enumerate(reply["changed"]) if not changed]
        if dead:
            raise _Verdict("rejected", f"kernel {dead[0] + 1} of {n} of the backward ({BACKWARD_ENTRY}) does no work at "
                                       f"scale {scale}: replacing its outputs by NaN leaves the gradients unchanged")
        outside, hidden = reply.get("outside_flops"), float(reply.get("outside_unknown_loops") or 0.0)
        ref = reference_vjp_flops(run.task, scale)
        if outside is None or ref is None:
            notes.append(f"scale {scale}: the share of the backward's work outside kernels was not measured")
            continue
        ref = max(float(ref), 1.0)
        if hidden > OUTSIDE_SHARE_FLAG * ref:
            raise _Verdict("rejected", f"work outside the backward's kernels at scale {scale} runs in a loop whose trip "
                                       "count the judge cannot read: put the loop in a kernel, or make it a counted "
                                       "fori_loop")
        share = float(outside) / ref
        grads = sum(int(np.prod(run.task.arg_structs(scale)[i].shape)) for i in differentiable(run.task))
        if share > OUTSIDE_SHARE_REJECT and outside > EPILOGUE_OPS_PER_OUTPUT * grads:
            raise _Verdict("rejected", f"{share:.0%} of the reference VJP's FLOPs run outside the backward's kernels at "
                                       f"scale {scale} ({float(outside):.3g} of {ref:.3g}): the backward's pallas_calls "
                                       f"must do the work, not XLA (leave {BACKWARD_ENTRY} out to use the reference's "
                                       "VJP)")
        if share > OUTSIDE_SHARE_FLAG:
            run.flags.append(f"scale {scale}: {share:.0%} of the reference VJP's FLOPs run outside the backward's kernels")
    return "; ".join(notes)


def reference_vjp(task: Any, scale: str, inputs: list[np.ndarray], cotangents: list[np.ndarray], *,
                  upcast: bool = False, f64: bool = False) -> list[np.ndarray] | None:
    """``jax.vjp`` of the task's reference at ``scale`` with respect to its floating inputs (the others held fixed);
    ``upcast``: 16-bit floating inputs and cotangents in float32; ``f64``: float32 inputs and cotangents in float64
    with JAX's 64-bit mode on (either is None when the reference does not run that way). The forward and the
    pullback run as one jitted program, as the forward's reference outputs do (``suite.ReferenceCache``), compiled
    once per task, size and form (:func:`_vjp_program`)."""
    import contextlib

    import jax

    from mk.harness.compare import low_precision

    want = differentiable(task)
    if upcast:
        inputs = [x.astype(np.float32) if low_precision(x.dtype) else x for x in inputs]
        cotangents = [c.astype(np.float32) if low_precision(c.dtype) else c for c in cotangents]
    if f64:
        inputs = [x.astype(np.float64) if x.dtype == np.float32 else x for x in inputs]
        cotangents = [c.astype(np.float64) if c.dtype == np.float32 else c for c in cotangents]
    mode = contextlib.ExitStack()
    if f64:
        for ctx in (jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest")):
            mode.enter_context(ctx)
    floats = [inputs[i] for i in want]
    fixed = [None if i in want else x for i, x in enumerate(inputs)]
    try:
        with mode:
            fn = _vjp_program(task, scale, tuple(want), [(x.shape, str(x.dtype)) for x in inputs], f64)
            return [np.asarray(g) for g in fn(floats, fixed, list(cotangents))]
    except Exception:  # noqa: BLE001 - only the upcast/f64 forms may fail (the plain one is the reference itself)
        if upcast or f64:
            return None
        raise


#: jitted reference VJPs by (task, size, statics, differentiated inputs, input types, 64-bit), the newest last
_VJP_PROGRAMS: dict[tuple[Any, ...], Any] = {}
_VJP_PROGRAMS_KEPT = 32


def _vjp_program(task: Any, scale: str, want: tuple[int, ...], types: list[tuple[Any, str]], f64: bool) -> Any:
    """One jitted function ``(floats, fixed, cotangents) -> gradients`` of the reference at ``scale``: ``floats`` the
    inputs differentiated (``want``), ``fixed`` the others (None where a float goes), the cotangents cast to the
    outputs' dtypes. Kept per task and size (a fresh size under a reused scale name is another key), so the many
    cotangents and cases of one judgement, and the judgements of one run, trace and compile it once."""
    import jax

    key = (task.fingerprint(), scale, repr(task.static_values(scale)), want, repr(types), f64)
    fn = _VJP_PROGRAMS.pop(key, None)
    if fn is None:
        ref = task.bind(task.reference, scale)

        def vjp(floats: list[Any], fixed: list[Any], cotangents: list[Any]) -> Any:
            def f(*values: Any) -> Any:
                xs = list(fixed)
                for i, v in zip(want, values):
                    xs[i] = v
                return ref(*xs)

            out, pullback = jax.vjp(f, *floats)
            leaves = jax.tree_util.tree_leaves(out)
            cts = [c.astype(o.dtype) for c, o in zip(cotangents, leaves)]
            return pullback(jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out), cts))

        fn = jax.jit(vjp)
    _VJP_PROGRAMS[key] = fn
    while len(_VJP_PROGRAMS) > _VJP_PROGRAMS_KEPT:
        _VJP_PROGRAMS.pop(next(iter(_VJP_PROGRAMS)))
    return fn


def compare(expected: list[np.ndarray], got: list[np.ndarray], tol: float, elem: tuple[float, float]
            ) -> tuple[bool, float, int, str]:
    """(ok, worst error relative to the input's largest finite reference gradient, which gradient, why not ok).

    Only entries where the reference is finite are compared (the scale is the largest finite one), and the candidate
    must be finite at every one of them: a NaN/inf in the reference never switches the check off. Two bounds per
    input: the max error within ``tol`` of the largest gradient, and elementwise ``|d - r| <= elem[0] * max|r| +
    elem[1] * |r|`` (so small entries are judged too, not only the large ones)."""
    worst, where = 0.0, 0
    for k, (e, g) in enumerate(zip(expected, got)):
        if tuple(e.shape) != tuple(g.shape):
            return False, float("inf"), k, "a different shape"
        e64, g64 = e.astype(np.float64), g.astype(np.float64)
        fin = np.isfinite(e64)
        if not np.all(np.isfinite(g64[fin])):
            bad = int(np.count_nonzero(~np.isfinite(g64[fin])))
            return False, float("inf"), k, f"{bad} NaN/inf value(s) where the reference's gradient is finite"
        ef, gf = e64[fin], g64[fin]
        scale = max(float(np.max(np.abs(ef), initial=0.0)), 1e-30)
        diff = np.abs(ef - gf)
        err = float(np.max(diff, initial=0.0)) / scale
        if err > worst:
            worst, where = err, k
        if err > tol:
            return False, err, k, f"{err:.3g} of its largest value (allowed {tol:.3g})"
        over = diff > elem[0] * scale + elem[1] * np.abs(ef)
        if np.any(over):
            i = int(np.argmax(over))
            return False, err, k, (f"{int(np.count_nonzero(over))} of {ef.size} entries outside the elementwise bound "
                                   f"{elem[0]:.2g}*max|r| + {elem[1]:.2g}*|r| (e.g. {gf[i]:.4g} for {ef[i]:.4g})")
    return True, worst, where, ""


def fair(own_ref: list[np.ndarray], truth: list[np.ndarray], got: list[np.ndarray], factors: tuple[float, float],
         own_name: str, truth_name: str) -> tuple[bool, str]:
    """The forward's yardstick rules (:mod:`mk.harness.compare`) for gradients: against ``truth`` (the reference's VJP
    in higher precision: float64 for float32 inputs, float32 for 16-bit ones), every gradient's worst error is at most
    ``factors[0]`` times the reference's own VJP's (``own_ref``, at the task's dtypes) worst error and its RMS error at
    most ``factors[1]`` times the own VJP's RMS error, and it is finite where ``truth`` is. The yardstick is the
    reference's own error on this very case (large magnitudes whose softmax cancels), so an honest backward is not
    held to more accuracy than the task's dtypes give the reference itself. (ok, words)."""
    from mk.harness.compare import _stats, _uncorrelated_stats

    words = []
    for k, (r, t, g) in enumerate(zip(own_ref, truth, got)):
        if not (tuple(r.shape) == tuple(t.shape) == tuple(g.shape)) or np.dtype(t.dtype).itemsize < 4:
            return False, ""
        t64 = t.astype(np.float64)
        fin = np.isfinite(t64)
        tf, rf, gf = t64[fin], r.astype(np.float64)[fin], g.astype(np.float64)[fin]
        if not np.all(np.isfinite(gf)) or not np.all(np.isfinite(rf)):
            return False, ""
        own, mine = np.abs(rf - tf), np.abs(gf - tf)
        own_max, mine_max = float(own.max(initial=0.0)), float(mine.max(initial=0.0))
        own_rms = float(np.sqrt(np.mean(own * own))) if own.size else 0.0
        mine_rms = float(np.sqrt(np.mean(mine * mine))) if mine.size else 0.0
        loose = _uncorrelated_stats(_stats(tf, gf), np.dtype(g.dtype)) if tf.size else None
        if mine_max > factors[0] * own_max or mine_rms > factors[1] * own_rms or loose:
            if loose:
                return False, f"; against the VJP computed in {truth_name} it is uncorrelated ({loose})"
            return False, (f"; against the VJP computed in {truth_name} its error (worst {mine_max:.3g}, RMS "
                           f"{mine_rms:.3g}) exceeds {factors[0]:g}x / {factors[1]:g}x the {own_name} VJP's own (worst "
                           f"{own_max:.3g}, RMS {own_rms:.3g})")
        words.append(f"gradient {k}: worst {mine_max:.3g} vs own {own_max:.3g}, RMS {mine_rms:.3g} vs own {own_rms:.3g}")
    return True, "; ".join(words)


def nonfinite(expected: list[np.ndarray]) -> int:
    """How many reference gradient entries are NaN/inf (not compared)."""
    return sum(int(np.count_nonzero(~np.isfinite(e.astype(np.float64)))) for e in expected)


def cotangents(rng: np.random.Generator, outs: list[Any]) -> list[tuple[str, list[np.ndarray]]]:
    """The output cotangents each scale is judged with, their sizes drawn from ``rng`` (the secret seed) so a backward
    cannot tell a judged cotangent by its statistics: a normal one whose rows are scaled by factors in [0.1, 10] with
    about a quarter of its rows (at least one, never all) exactly zero, as loss-masked tokens give
    (:func:`mk.task.zero_rows`, without its column); the same without zero rows (an unmasked loss); a constant c in
    [0.1, 10] (a weighted sum loss), c/N (a mean loss: small and constant) and a normal one of scale in [1e2, 1e4] with
    rows scaled too (a large loss weight), masked or not as ``rng`` draws. A row is everything but the last axis.
    Round 15: a backward honest only when a row it looks at is zero or of one of the judged spreads passed about one
    judgement in a hundred when every normal cotangent was masked, so one never is; round 16 (stop 37's CI-like run):
    with the masked one drawn between the scaled and the large one, a backward wrong only on zero rows hid under the
    large one's gradients whenever every scale drew it there, so the scaled one is always masked."""
    def each(fn: Any) -> list[np.ndarray]:
        return [np.asarray(fn(o)).astype(np.float32).astype(o.dtype) for o in outs]

    def rows(o: Any, masked: bool) -> np.ndarray:
        shape = tuple(o.shape)
        if len(shape) <= 1:
            return np.ones(shape)
        factors = 10.0 ** rng.uniform(-1.0, 1.0, shape[:-1] + (1,))
        # the last axis has length 1 here: rows only, no column
        return zero_rows(rng, factors) if masked else factors

    c, big = 10.0 ** rng.uniform(-1.0, 1.0), 10.0 ** rng.uniform(2.0, 4.0)
    big_masked = bool(rng.integers(2))
    return [("a normal cotangent with rows scaled by secret factors, some of them zero (a masked loss)",
             each(lambda o: rng.standard_normal(tuple(o.shape)) * rows(o, True))),
            ("a normal cotangent with rows scaled by secret factors",
             each(lambda o: rng.standard_normal(tuple(o.shape)) * rows(o, False))),
            (f"a constant cotangent {c:.3g} (a sum loss)", each(lambda o: np.full(tuple(o.shape), c))),
            (f"a cotangent of {c:.3g}/N (a mean loss)", each(lambda o: np.full(tuple(o.shape), c / max(int(np.prod(o.shape)), 1)))),
            (f"a normal cotangent times {big:.3g}",
             each(lambda o: big * rng.standard_normal(tuple(o.shape)) * rows(o, big_masked)))]


def bounds(task: Any, i: int) -> tuple[bool, float, tuple[float, float]]:
    """(16-bit?, tol, elementwise (a, b)) for the gradient of input ``i``, from that input's own dtype: a float32
    gradient is held to float32 bounds even where other inputs or the output are 16-bit (its reference VJP is
    float32 math). The task's tolerance loosens them where it speaks of that precision: for a 16-bit gradient, or
    on a task with no 16-bit input or output (a loose float32 tolerance is then the task's own choice)."""
    import jax

    from mk.harness.compare import low_precision
    from mk.task import np_dtype

    low = low_precision(np_dtype(task.args[i].dtype))
    mixed = any(low_precision(np_dtype(a.dtype)) for a in task.args) or any(
        low_precision(np.dtype(o.dtype)) for o in jax.tree_util.tree_leaves(task.output_structs(task.default_scale)))
    atol, rtol = task.tolerance.for_output(0)
    loosen = min(atol, rtol) if (low or not mixed) else 0.0
    key = "low" if low else "f32"
    return low, max(GRAD_TOL[key], loosen), (GRAD_ELEM[key][0], max(GRAD_ELEM[key][1], loosen))


def judge_case(run: Any, scale: str, inputs: list[np.ndarray], ct: list[np.ndarray], expected: list[np.ndarray],
               got: list[np.ndarray], limits: list[tuple[bool, float, tuple[float, float]]]
               ) -> tuple[bool, float, int, str, str]:
    """One gradient case, each gradient by its own bounds (``limits``: :func:`bounds` of each), then, where they
    refuse it, by the yardstick rule against the VJP in higher precision (float32 for a 16-bit gradient, float64 for a float32 one).
    (ok, worst error, which gradient, why not ok, the yardstick rule's words)."""
    from mk.harness.compare import F32_MAX_FACTOR, F32_RMS_FACTOR

    higher: dict[str, list[np.ndarray] | None] = {}

    def truth(kind: str) -> list[np.ndarray] | None:
        if kind not in higher:
            higher[kind] = (reference_vjp(run.task, scale, inputs, ct, upcast=True) if kind == "f32" else
                            reference_vjp(run.task, scale, inputs, ct, upcast=True, f64=True))
        return higher[kind]

    worst_all, where, words = 0.0, 0, []
    for k, (low, tol, elem) in enumerate(limits):
        ok, worst, _, why = compare([expected[k]], [got[k]], tol, elem)
        rule = ""
        if not ok and low:
            f32 = truth("f32")
            if f32 is not None:
                ok, worst, _, why = compare([f32[k]], [got[k].astype(np.float32)], tol, elem)
                if not ok:
                    ok, rule = fair([expected[k]], [f32[k]], [got[k]], LOW_FACTORS, "16-bit", "float32")
        elif not ok and got[k].dtype == np.float32:
            f64 = truth("f64")
            if f64 is not None and f64[k].dtype == np.float64:
                ok, rule = fair([expected[k]], [f64[k]], [got[k]], (F32_MAX_FACTOR, F32_RMS_FACTOR), "float32", "float64")
        if not ok:
            return False, worst, k, why + (rule if rule else ""), ""
        if rule:
            words.append(rule.replace("gradient 0", f"gradient {k}"))
        elif worst > worst_all:
            worst_all, where = worst, k
    return True, worst_all, where, "", "; ".join(words)


def interpreter_check(run: Any, scale: str, inputs: list[np.ndarray], ct: list[np.ndarray], expected: list[np.ndarray],
                      limits: list[tuple[bool, float, tuple[float, float]]], what: str) -> None:
    """Rules 5 and 18 on the backward: one gradient case per scale runs again in the tracer, through the TPU
    interpreter with race detection (its host callbacks cannot be exported), as the forward's first case of each
    scale does. A race rejects; an error, or gradients the bounds refuse, is incorrect. A tracer could hide a
    finding, never invent a pass: the runner's gradients of the same case were judged already."""

    facts = run.programs[scale]["backward"]
    for check in CHECK_RUNS:
        said = f"TPU-interpreter check of {what}{check_note(facts, check)}"
        folder = _write_inputs(run, f"grad_race_{secrets.token_hex(8)}", [*inputs, *ct], into=run.tracer.workdir)
        got, _ = ask_outputs(run, run.tracer, folder, {"op": "run", "scale": scale, "dir": _rel(run.tracer, folder),
                                                       "part": "bwd", "run": check,
                                                       "seed": program.check_seed(facts.get("parallel_axes") or [])},
                             case_limit(run, facts.get("grid_steps"), 20.0), said)
        ok, _, k, why, _ = judge_case(run, scale, inputs, ct, expected, got, limits)
        if not ok:
            name = run.task.args[differentiable(run.task)[k]].name
            raise _Verdict("incorrect", f"{said}: the gradient of {name} differs from the reference's VJP: {why}")


def check(run: Any) -> str:
    """Run the written backward on one fresh case per scale and compare it with the reference's VJP; raises the
    judge's verdict on a mismatch. Returns the verdict's words ("" without a backward)."""
    from mk.harness.suite import Case

    if not declares_backward(run.cand.source):
        return ""
    want = differentiable(run.task)
    work_note = ablate(run)  # the backward's kernels do its work (rule 15), before any case runs
    limits = [bounds(run.task, i) for i in want]  # per gradient, from its input's dtype: the same at every case
    form = "bwd_target" if run.on_device or run.target.host else "bwd_cpu"
    worst_all, judged, skipped, raced = 0.0, 0, 0, 0
    fair_words: list[str] = []
    # rules 5 and 18 as for the forward: the suite's scales whose backward has kernels, off a device, on a target
    # whose kernels the TPU interpreter models (DMA races, out-of-bounds blocks, revisited output blocks)
    interpreted = ({s for s in run.suite.scales if run.programs[s]["backward"].get("kernels")}
                   if run.target.interpreter == "tpu" and not run.on_device else set())
    for scale in run.scales:
        import jax

        rng = np.random.default_rng(secrets.randbelow(2**63))
        outs = jax.tree_util.tree_leaves(run.task.output_structs(scale))
        cts = cotangents(rng, outs)
        # the suite's input distributions at this scale (large magnitudes etc.), each with the normal cotangent, and
        # every other cotangent on normal inputs
        dists = list(dict.fromkeys(["normal", *(c.distribution for c in run.suite.for_scale(scale))]))
        plan = [(d, cts[0]) for d in dists] + [("normal", ct) for ct in cts[1:]]
        for n, (dist, (ct_name, ct)) in enumerate(plan):
            case = Case(scale, secrets.randbelow(2**31), dist, note="gradient")
            inputs = run.suite.inputs(run.task, case)
            what = (f"the backward ({BACKWARD_ENTRY}) on a fresh {dist} case with {ct_name} at scale {scale} "
                    f"(seed {case.seed})")
            folder = _write_inputs(run, f"grad_{scale}_{secrets.token_hex(4)}", [*inputs, *ct])
            got, _ = ask_outputs(run, run.runner, folder, {"op": "case", "scale": scale, "dir": _rel(run.runner, folder),
                                                           "form": form},
                                 run.timeouts.case_s * (1 if run.on_device else 20.0), what)
            expected = reference_vjp(run.task, scale, inputs, ct)
            ok, worst, k, why, rule = judge_case(run, scale, inputs, ct, expected, got, limits)
            if rule and ok:
                fair_words.append(rule)
            if not ok:
                raise _Verdict("incorrect", f"{what}: the gradient of {run.task.args[want[k]].name} differs from the "
                                            f"reference's VJP: {why}")
            if n == 0 and scale in interpreted:
                interpreter_check(run, scale, inputs, ct, expected, limits, what)
                raced += 1
            worst_all = max(worst_all, worst)  # of the gradients the bounds passed (a yardstick pass has its words)
            judged += 1
            skipped += nonfinite(expected)
    note = (f"; {skipped} reference gradient entries were NaN/inf and not compared" if skipped else "")
    if fair_words:
        note += (f"; {len(fair_words)} case(s) passed by the yardstick rule: against the VJP in higher precision the "
                 f"error is within a few times the reference's own VJP's ({' | '.join(fair_words)})")
    if raced:
        note += (f"; its kernels ran race-free in the TPU interpreter on {raced} of those cases, with the same "
                 "gradients")
    if work_note:
        note += "; " + work_note
    return (f"; its backward ({BACKWARD_ENTRY}) matches the reference's VJP on {judged} fresh cases "
            f"(worst {worst_all:.2g} of the largest gradient{note})")
