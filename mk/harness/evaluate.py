"""``evaluate``: the judge.

Static check → **tracer** (untrusted: imports the candidate inside OS
isolation, traces it once per scale at abstract shapes, exports programs) →
**program checks** here (the exported target program's custom calls: kernels
present, no host callbacks or foreign code; output tree, shapes and dtypes;
candidate-set interpret; low-precision in-kernel dots) → **runner** (trusted
code, never imports the candidate: ablates each kernel of the target program
and requires the result to change, measures the work outside kernels, runs
each case on fresh inputs, times on the device) → comparison and verdict
here. Cases stream one at a time: generated, run, compared, deleted.

Nothing the tracer says counts for a positive verdict except the programs it
exported, which the judge checks itself; see ``docs/judge.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mk.candidate import Candidate, load_candidate
from mk.errors import CandidateError, ConfigError, MkError, TaskError
from mk.harness.arrays import encode_static, load_arrays
from mk.harness import program
from mk.harness.compare import Comparison, compare_fair, compare_fair_f64, compare_outputs, low_precision
from mk.harness.envelope import OUTSIDE, Envelope
from mk.harness.heldout import FRESH, fresh_sizes
from mk.harness.judging import (CHECK_RUNS, EPILOGUE_OPS_PER_OUTPUT, OUTSIDE_SHARE_FLAG, OUTSIDE_SHARE_REJECT,
                                _UNVERIFIABLE, _last_line, _one_line, _oom, _read_regular, _rel, _Run, _Verdict,
                                _write_inputs, ask_outputs, case_limit, check_facts, check_note, check_precision)
from mk.harness.process import Child, ChildFailed, Timeouts, default_memory_limit_mb
from mk.harness.results import SCREEN_FLAG, SCREENED, CaseResult, CostResult, EvalResult, StepResult, TimingResult
from mk.harness.suite import Case, FrozenSuite, ReferenceCache, build_suite, runnable_scales
from mk.harness.timing import MIN_INPUT_SETS, TimingOptions, not_measured, plausibility_flags, summarize
from mk.targets import Target, child_env, get_target
from mk.task import Task

log = logging.getLogger(__name__)


def static_step(candidate: Candidate, task: Task, target: str, require_pallas: bool) -> StepResult:
    """Rules 1, 2, 8 (first line): the source is checked before anything runs."""
    from mk.harness.static import check_source

    t0 = time.perf_counter()
    names = (task.source.stem,) if task.source is not None else ()
    found = check_source(candidate.source, target=target, require_pallas=require_pallas, task_names=names)
    return StepResult(name="static", ok=found.ok, seconds=time.perf_counter() - t0, detail=found.reason or "passed")


def evaluate(
    task: Task,
    candidate: Candidate | str | Path,
    *,
    target: str = "cpu",
    scale: str | None = None,
    suite: FrozenSuite | None = None,
    require_pallas: bool | None = None,
    measure: bool = True,
    timeouts: Timeouts | Mapping[str, float] | None = None,
    memory_limit_mb: int | None = None,
    config: Mapping[str, Any] | None = None,
    timing: TimingOptions | None = None,
    chip: str | None = None,
    no_spills: bool = False,
    also_chips: tuple[str, ...] | list[str] = (),
    claim: bool = False,
    screen: bool = False,
) -> EvalResult:
    """Judge ``candidate`` on ``task`` for ``target``.

    ``scale``: restrict correctness to that scale and time there (default: the
    suite covers every scale; timing at the task's default scale).
    ``chip``: the chip the device program is compiled for (``mk.chips``; default the target's, v6e or h100);
    ``no_spills``: a GPU kernel that spills registers is a ``compile_error``; ``also_chips``: chips of the same kind
    the program is also compiled for, as information (figures in ``compiled``, refusals as flags, never the verdict).
    ``claim``: run one case at each declared size the cases do not run that the envelope could claim (a verdict that
    is kept: ``mk eval``, the tuner's re-verified winner; a case at ``full`` can take minutes interpreted).
    ``screen``: a tuning trial's screen, not a verdict to keep: the static rules, the trace, the programs' rules, the
    chip's compile, the cases and the estimate, without the checks that cost most (the TPU-interpreter runs, ablation,
    the backward against the reference's VJP) and without fresh sizes; its ``correct`` says so in its reason and
    flags, and only ranks a config (:func:`mk.tuning.autotune` judges the winner whole before it is kept).
    ``require_pallas`` defaults to True for tpu/gpu. ``config`` is passed to
    the entry as keyword tunables. Never raises for anything the candidate
    does; raises :class:`TaskError`/:class:`CandidateError` for bad inputs."""
    started = time.perf_counter()
    cand = _as_candidate(candidate)
    tgt = get_target(target)
    from mk.chips import chip_for

    the_chip = chip_for(tgt, chip)
    require_pallas = tgt.needs_kernel if require_pallas is None else bool(require_pallas)
    if isinstance(timeouts, Mapping):
        timeouts = _timeouts(timeouts)
    if config:
        unknown = set(config) - set(cand.config_space) if cand.config_space else set()
        if unknown:
            raise CandidateError(f"config keys {sorted(unknown)} are not in the candidate's CONFIG_SPACE", hint=f"use {sorted(cand.config_space)}")
    static = static_step(cand, task, tgt.name, require_pallas)
    memory_mb = int(memory_limit_mb or default_memory_limit_mb())
    children = _spawn(tgt, memory_mb) if static.ok else None  # their JAX imports overlap the suite's references
    try:
        skipped: dict[str, str] = {}
        if suite is None:
            if scale is None:  # a scale too big to run here is compiled for the chip only, with a flag
                task, skipped = runnable_scales(task, memory_mb)
            suite = build_suite(task, scales=[scale] if scale else None)
        elif suite.task_fingerprint != task.fingerprint():
            raise TaskError(f"the suite was frozen for another version of task {task.name!r}", hint="rebuild it with build_suite(task)")
        suite_task = task
        task = suite.judged(task)  # the held-out scales: judged here, never shown to an author
        timed = scale or (task.default_scale if task.default_scale in suite.scales else suite.scales[0])
        if timed not in suite.scales:
            raise TaskError(f"scale {timed!r} is not in the suite (it has {', '.join(suite.scales)})", hint="build the suite with that scale")
    except BaseException:
        if children is not None:  # the tracer never serves another candidate; the warm runner stays
            from mk.harness import pool

            pool.discard(children[2])
        raise
    base = dict(task=task.name, target=tgt.name, scales=list(suite.scales), suite_hash=suite.hash, candidate_digest=cand.digest,
                envelope=_envelope(task, suite))
    judged_task = task  # the task the envelope describes (before this evaluation's fresh sizes)
    if not static.ok:
        status = "compile_error" if "SyntaxError" in static.detail.split(";")[0] else "rejected"
        return EvalResult(status=status, reason=static.detail, steps=_steps(static), seconds=time.perf_counter() - started, **base)
    # sizes drawn now, inside the box the envelope claims: the held-out sizes are public, these are not
    fresh = fresh_sizes(suite.base(suite_task), secrets) if not screen and any(c.scale in suite.heldout_names
                                                                                for c in suite.cases) else []
    fresh = [f for f in fresh if f.name not in task.scales]
    if fresh:
        task = task.with_scales({**task.scales, **{f.name: f for f in fresh}})
    run = _Run(task, tgt, suite, cand, timeouts or Timeouts(), timed, require_pallas, dict(config or {}), measure,
               timing or TimingOptions(), memory_mb)
    run.scales = tuple(suite.scales) + tuple(f.name for f in fresh)
    run.flags.extend(f"scale {name} not run on this CPU: {why}; compiled for the chip only" for name, why in skipped.items())
    run.too_big = tuple(skipped)
    run.judged_task = judged_task
    run.heldout = suite.heldout_names
    if the_chip is not None:  # declared scales the cases do not run: compiled for the chip only
        declared = {**suite_task.compile_only, **suite_task.scales}
        run.compile_scales = tuple(s for s in declared if s not in run.scales)
        extra = {s: declared[s] for s in run.compile_scales if s not in run.task.scales}
        if extra:
            run.task = run.task.with_scales({**run.task.scales, **extra})
    run.chip, run.no_spills, run.claim = the_chip, no_spills, claim and not screen
    run.also_chips = tuple(c for c in (chip_for(tgt, name) for name in also_chips) if c is not None and c != the_chip)
    run.env, run.iso, run.tracer, run.runner = children
    status, reason, error = "correct", "", ""
    timing_res: TimingResult | None = None
    cost_res: CostResult | None = None
    try:
        _check_declared_envelope(run)
        _start(run)
        _trace(run)
        _check_programs(run)
        _compile_for_chip(run)
        if not screen:
            _ablate(run)
            _check_races(run)
        _run_cases(run)
        extra = len(run.cases) - len(run.suite.cases)
        sizes = [name[len(FRESH):] for name in run.scales[len(run.suite.scales):]]
        reason = (f"all {len(run.suite.cases)} cases match the reference (and {extra} from a fresh random seed"
                  + (f", {len(sizes)} of them at fresh sizes {' and '.join(sizes)})" if len(sizes) > 1 else
                     f", one of them at a fresh size {sizes[0]})" if sizes else ")"))
        if screen:
            reason = f"{SCREENED}: {reason}"
            run.flags.append(SCREEN_FLAG)
        else:
            reason += gradient_check(run)  # a written backward against the reference's VJP (mk/harness/gradient.py)
        timing_res, cost_res = _time_and_cost(run)
        _run_claimed(run)
        if run.measure and not _wants_timing(run):  # no device here: the compiler's estimate, labelled as one
            run.estimate = _estimate(run)  # after the claims: it says whether the verdict claims its size
        if run.covered:
            reason += (f"; one case at {' and '.join(run.covered)} (compiled only, the judged sizes' code) matches too, "
                       "so the envelope claims it")
    except _Verdict as v:
        status, reason, error = v.status, v.reason, v.error
    except ChildFailed as exc:
        status, reason = _child_verdict(run, exc)
    except MkError:
        raise
    except Exception as exc:  # noqa: BLE001 - mk's own failure must end in a recorded verdict, not a traceback
        log.exception("the judge failed on %s", task.name)
        status, reason = "harness_error", f"mk's judge failed ({type(exc).__name__}: {exc}); please report it"
    finally:
        _finish(run)
    covered = {}
    if status == "correct" and run.covered:  # the envelope claims them too
        def chips(scale: str) -> list[str]:  # the verdict's chip, then the chips compiled beside it that took the size
            return list(dict.fromkeys([run.chip.name] + [c.chip for c in run.compiled if c.scale == scale and c.ok]))

        covered = {s: Envelope.point(run.task, s, chips(s)) for s in run.covered}
        base["envelope"] = _judged_envelope(judged_task, run, suite, covered)
    elif run.unbuilt:  # the sizes judged, exactly (_narrow)
        base["envelope"] = _judged_envelope(judged_task, run, suite)
    if run.unbuilt:
        base["scales"] = list(run.suite.scales)
    if timing_res is None:
        why = "not measured: the candidate is not correct" if status != "correct" else _no_timing(run)
        timing_res = not_measured(why, timed)
    steps = _steps(static, _compile_step(run, status), _correctness_step(run, status),
                   StepResult(name="timing", ok=timing_res.measured if status == "correct" and not _no_timing(run) else None,
                              seconds=run.seconds.get("timing", 0.0), detail=_timing_detail(timing_res)),
                   StepResult(name="cost", ok=(cost_res is not None and cost_res.candidate_flops is not None) or None,
                              detail=cost_res.note if cost_res else _no_cost(run)))
    return EvalResult(status=status, reason=_one_line(reason), error=error, steps=steps, cases=run.cases, timing=timing_res, cost=cost_res,
                      flags=run.flags, isolation=run.isolation, verified_by=run.verified_by if status == "correct" else "",
                      failed_case=run.failed_case if status != "correct" else "",
                      compile_check=run.compile_check, compiled=run.compiled, covered=covered,
                      estimate=run.estimate if status == "correct" else None,
                      seconds=time.perf_counter() - started, **base)


# --- the pipeline -------------------------------------------------------------------
def gradient_check(run: _Run) -> str:
    from mk.harness import gradient

    return gradient.check(run)


def _spawn(target: Target, memory_mb: int) -> tuple[dict[str, str], Any, Child, Child]:
    """A tracer (isolated; a warm spare when one waits) and the runner, started before the suite is built."""
    from mk.harness import isolation, pool

    env = {"JAX_PLATFORMS": "cpu"} if target.host or not target.device_present() else {}
    iso = isolation.detect()
    return env, iso, pool.tracer({**env, **child_env(target)}, memory_mb, iso), pool.runner(env, memory_mb)


def prestart(target: str, memory_limit_mb: int | None = None) -> None:
    """Start the tracer and the runner for ``target`` now (their JAX imports then overlap the caller's own
    start-up, e.g. loading the task); the next :func:`evaluate` takes them."""
    from mk.harness import isolation, pool

    tgt = get_target(target)
    memory_mb = int(memory_limit_mb or default_memory_limit_mb())
    # a guess without importing JAX here (that would serialise the start-up this overlaps); when it is wrong the
    # evaluation's own key differs and it starts its processes itself
    env = {} if tgt.device_nodes_present() else {"JAX_PLATFORMS": "cpu"}
    pool.prepare_spare({**env, **child_env(tgt)}, memory_mb, isolation.detect())
    pool.runner(env, memory_mb)


def _start(run: _Run) -> None:
    """Give the tracer its candidate and open this evaluation's folder in the runner's work dir."""
    run.isolation = run.iso.description
    (run.tracer.workdir / "candidate.py").write_text(run.cand.source, encoding="utf-8")
    (run.tracer.workdir / "spec.json").write_text(json.dumps(_spec(run)))
    run.rdir = run.runner.workdir / f"eval-{secrets.token_hex(6)}"
    run.rdir.mkdir()


def _finish(run: _Run) -> None:
    from mk.harness import pool

    if run.tracer is not None:
        pool.discard(run.tracer)
    if run.runner is not None and not run.runner.alive():
        pool.discard(run.runner)
    if run.rdir is not None:
        shutil.rmtree(run.rdir, ignore_errors=True)
    if run.runner is not None and run.runner.alive():
        pool.recycle_if_grown(run.runner)
    if run.iso is not None:
        pool.prepare_spare({**run.env, **child_env(run.target)}, run.memory_mb, run.iso)


def _trace(run: _Run) -> None:
    n = len(run.scales)
    reply = run.tracer.ask({"op": "load"}, run.timeouts.import_s, "import")
    if reply.get("ok"):
        run.seconds.update({str(k): float(v) for k, v in (reply.get("seconds") or {}).items() if isinstance(v, (int, float))})
        reply = run.tracer.ask({"op": "trace"}, run.timeouts.compile_s * n, "compile (trace and lower)")
    run.seconds.update({str(k): float(v) for k, v in (reply.get("seconds") or {}).items() if isinstance(v, (int, float))})
    if reply.get("rejected"):
        raise _Verdict("rejected", str(reply["rejected"]))
    if not reply.get("ok"):
        phase, text = reply.get("phase", "compile"), _last_line(str(reply.get("error", "unknown error")))
        where = str(reply.get("where") or "")
        if _oom(text):
            raise _Verdict("crashed", f"out of memory during {phase}: {text}")
        marker = next((m for m in _UNVERIFIABLE if m in text), None)
        # the words alone are the candidate's to fake: only an error JAX or jaxlib raised, in words the candidate's
        # source does not hold, means "this machine cannot"; the candidate's own raise is judged as what it is
        if marker is not None and reply.get("origin") == "library" and marker not in run.cand.source:
            raise _Verdict("unverifiable_here", f"cannot lower or run this kernel here ({text}); judge it on a {run.target.name} device")
        what = "failed to import" if phase == "import" else f"failed the {run.target.name} compile check"
        at = f" at scale {reply['scale']}" if reply.get("scale") else ""
        note = ""
        if OUTSIDE in text or marker is not None:  # outside_envelope is decided before the trace, from the declaration
            note = (" (the candidate's error claims a refusal or a limit of this machine; the judge found neither: no "
                    "declared envelope excludes these inputs, and the words came from the candidate, so it is judged as a failure)")
        raise _Verdict("compile_error", f"candidate {what}{at}: {text}{where}{note}", _whole_error(reply))
    scales = reply.get("scales")
    if not isinstance(scales, dict) or set(scales) != set(run.scales) | set(run.compile_scales):
        raise _Verdict("crashed", "the tracer's reply does not cover the suite's scales")
    for name in run.compile_scales:  # a declared scale the cases do not run and the candidate cannot trace: not claimed
        entry = scales.get(name)
        if isinstance(entry, dict) and "compile_only_error" in entry:
            run.flags.append(f"scale {name} (declared, compiled only) does not trace: "
                             f"{_last_line(str(entry['compile_only_error']))[:300]}")
    run.compile_scales = tuple(n for n in run.compile_scales if "compile_only_error" not in (scales.get(n) or {}))
    unbuilt = {n: _last_line(str(e["build_error"]))[:300] for n, e in scales.items() if isinstance(e, dict) and "build_error" in e}
    if any(not (n in run.scales and _optional(run, n)) for n in unbuilt):
        raise _Verdict("crashed", "the tracer skipped a scale the cases must run")
    run.programs = scales
    _narrow(run, {n: f"it does not trace: {why}" for n, why in unbuilt.items()})
    run.compile_detail = f"traced once per scale and lowered for {run.target.platform}"


def _optional(run: _Run, scale: str) -> bool:
    """A scale the verdict may leave out when the kernel cannot be built there: a held-out scale or a fresh size
    (never a scale the task declares, which the user asked for), unless the candidate declares an envelope
    (``MK_ENVELOPE``): it then claims every judged size (:func:`_check_declared_envelope` refuses one it excludes),
    so failing to build at one is a failure, not a narrower claim."""
    return not run.declares_envelope and (scale.startswith(FRESH) or scale in run.heldout)


def _narrow(run: _Run, unbuilt: dict[str, str]) -> None:
    """Leave out the held-out scales and fresh sizes the kernel cannot be built at (``unbuilt``: scale -> why): no
    case runs there, each is a flag, and the verdict's envelope becomes the sizes judged, exactly (issue 22, item 5:
    an upstream kernel right at the task's sizes whose block sizes do not divide a held-out one is not a
    compile_error; one that is wrong at a size it accepts stays incorrect)."""
    if not unbuilt:
        return
    run.scales = tuple(s for s in run.scales if s not in unbuilt)
    kept = tuple(c for c in run.suite.cases if c.scale not in unbuilt)
    run.suite = FrozenSuite(run.suite.task_name, run.suite.task_fingerprint, kept, run.suite.dropped, (), run.suite.base_scales)
    for name, why in unbuilt.items():
        size = f"the fresh size {name[len(FRESH):]}" if name.startswith(FRESH) else f"the held-out scale {name}"
        run.flags.append(f"cannot be built at {size}: {why}; not judged there, so the verdict claims only the sizes "
                         "it was judged at")
    run.unbuilt.update(unbuilt)


def _check_declared_envelope(run: _Run) -> None:
    """``outside_envelope`` is the judge's own finding: a kernel mk wrote declares its envelope (the ``MK_ENVELOPE``
    literal its guard checks), and the judge applies the guard's check to that literal here, before the candidate
    runs. An error whose words mimic the guard's is never relabelled (see :func:`_trace`)."""
    from mk.harness.arrays import decode_static
    from mk.harness.envelope import declared_outside, declared_rule

    import jax

    rule = declared_rule(run.cand.source)
    if rule is None:
        return
    run.declares_envelope = True
    for scale in run.scales:
        structs = run.task.arg_structs(scale)
        try:
            static = {s.name: decode_static(encode_static(v)) for s, v in zip(run.task.static, run.task.static_values(scale))}
        except TypeError:  # a static with no JSON form: the trace refuses it anyway (see _spec)
            return
        try:
            why = declared_outside(rule, [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in structs], static, run.config)
        except ValueError as exc:
            run.flags.append(f"{exc}: judged as a kernel without a declared envelope")
            run.declares_envelope = False
            return
        if why is not None:
            raise _Verdict("outside_envelope", f"the candidate's declared envelope (MK_ENVELOPE, checked by the judge) "
                                               f"excludes scale {scale}: {OUTSIDE}: {why}")


def _check_programs(run: _Run) -> None:
    """Rules 1, 16, 17, 18, 19 on the exported programs (the tracer's facts only add reasons)."""
    import jax
    from jax import export

    from mk.harness import gradient

    for scale in (*run.scales, *run.compile_scales):
        facts = run.programs[scale]
        if facts.get("callbacks"):
            raise _Verdict("rejected", f"host callback ({', '.join(map(str, facts['callbacks']))}) in the candidate's program at "
                                       f"scale {scale}: the computation must run on the device, not in Python")
        check_facts(run, scale, facts)
        files = {form: facts.get(f"{form}_file") for form in ("target", "cpu")}
        for form, name in files.items():
            if name is not None and (not isinstance(name, str) or "/" in name or name.startswith(".")):
                raise _Verdict("crashed", f"the tracer named a {form} program it did not write ({name!r})")
        if files["target"] is None:
            raise _Verdict("compile_error", f"no program was exported for {run.target.name} at scale {scale}")
        exported = {}
        for form, name in files.items():
            if name:
                try:
                    exported[form] = export.deserialize(bytearray(_read_regular(run.tracer.workdir / name)))
                except _Verdict:
                    raise
                except Exception as exc:  # noqa: BLE001 - the tracer's file, not mk's bug
                    raise _Verdict("crashed", f"the tracer's {form} program at scale {scale} is not a readable jax.export "
                                              f"artifact ({type(exc).__name__})") from None
        sites = program.custom_calls(exported["target"].mlir_module())
        foreign = program.foreign_calls(sites, run.target.name)
        if foreign:
            raise _Verdict("rejected", f"the program calls custom code {foreign[0].target!r} at scale {scale}: only "
                                       f"{run.target.name} kernels may appear as custom calls (no host callbacks)")
        for form, exp in exported.items():
            if form == "cpu" and program.custom_calls(exp.mlir_module()):
                raise _Verdict("rejected", f"the CPU form of the program contains custom calls at scale {scale}")
        kernels = program.kernel_calls(sites, run.target.name)
        if run.require_pallas and not kernels:
            raise _Verdict("rejected", f"no pallas_call kernel in the program lowered for {run.target.name} at scale {scale}: "
                                       "write the computation as a Pallas kernel (a pallas_call the program does not use, or one "
                                       "the candidate runs in interpret mode, does not count), or judge it as a pure-JAX rewrite")
        want = jax.eval_shape(run.task.bind(run.task.reference, scale), *run.task.arg_structs(scale))
        why = _structure_mismatch(want, exported["target"])
        if why:
            raise _Verdict("incorrect", f"scale {scale}: {why}")
        check_precision(run, scale, facts, exported["target"])
        run.exported[scale] = exported
        facts["kernel_calls"] = len(kernels)
        if files["cpu"] is None and not run.on_device and not run.target.host and scale in run.scales:
            fallback = "the TPU interpreter" if run.target.interpreter == "tpu" else "Pallas's interpreter"
            run.flags.append(f"scale {scale}: {facts.get('cpu_error') or 'the HLO interpreter cannot run this kernel'}; its cases "
                             f"are run by {fallback} inside the isolated tracer instead (weaker: see the verdict's verified_by)")
    # the judged scales, and the compile-only ones: one case runs at each the envelope may claim (_run_claimed)
    files = {s: {f: run.programs[s].get(f"{f}_file") for f in ("target", "cpu")} for s in (*run.scales, *run.compile_scales)}
    copied = {}
    for scale, forms in files.items():
        copied[scale] = {}
        for form, name in forms.items():
            if name:
                dest = run.rdir / f"{scale}.{form}.export"
                dest.write_bytes(_read_regular(run.tracer.workdir / name))
                copied[scale][form] = _rel(run.runner, dest)
    refs = {}
    timing = _wants_timing(run)
    for scale in (*run.scales, *run.compile_scales):
        platforms = ("cpu", run.target.platform) if timing and scale == run.timed else ("cpu",)
        dest = run.rdir / f"{scale}.reference.export"
        dest.write_bytes(_refs(run).export(scale, platforms))
        refs[scale] = _rel(run.runner, dest)
    gradient.check_programs(run, copied)  # a written backward's programs (mk/harness/gradient.py)
    loaded = run.runner.ask({"op": "load", "programs": copied, "reference": refs, "on_device": run.on_device},
                            run.timeouts.import_s, "loading the programs")
    if not loaded.get("ok"):
        raise _Verdict("crashed", f"the runner could not load the exported programs ({_last_line(str(loaded.get('error')))})")


def _compile_for_chip(run: _Run) -> None:
    """The compile stage (:mod:`mk.harness.chipcheck`): each scale's device program, byte for byte the one just
    checked, compiled for the chip by the trusted compile worker."""
    from mk.harness import chipcheck

    if run.chip is None:
        return
    why = chipcheck.lowered_only(run.chip)
    if why:
        run.compile_check = why
        return
    t0 = time.perf_counter()
    programs = {scale: _read_regular(run.tracer.workdir / run.programs[scale]["target_file"])
                for scale in (*run.scales, *run.compile_scales)}
    run.device_programs = programs
    # the declared scales the cases run must compile, and those asked for but too big to run here; a fresh size
    # (drawn by the judge) or a scale left out with --scale the chip refuses is a flag
    optional = {s for s in run.scales if _optional(run, s)}  # a refusal there narrows the verdict (_narrow)
    declared = set(run.scales) - optional
    try:
        results, flags = chipcheck.compile_scales(run.chip, programs, declared | set(run.too_big), memory_mb=run.memory_mb,
                                                  no_spills=run.no_spills, unflagged=optional)
    except chipcheck.CompileRefused as refused:
        raise _Verdict(refused.status, refused.reason + (" (a scale asked for, too big to run on this CPU, so compiled "
                                                         "only)" if any(f"scale {s}:" in refused.reason for s in run.too_big)
                                                        else ""), refused.error) from None
    finally:
        run.seconds["chip_compile"] = time.perf_counter() - t0
    results = [r.model_copy(update={"judged": False}) if r.scale in run.too_big else r for r in results]
    run.compiled = results
    run.flags.extend(flags)
    done = [r.scale for r in results if r.ok]
    errors = {r.scale: r.error for r in results if not r.ok}
    _narrow(run, {s: f"the {run.chip.name} compiler refuses it ({errors.get(s, '')[:200] or 'no result'})"
                  for s in sorted(optional - set(done))})
    run.covered = _covered(run, [s for s in run.compile_scales if s in done]) if run.claim else []
    run.compile_check = f"compiled for {run.chip.name} at {_scale_words(done)}" + (
        f" ({results[0].compiler})" if results and results[0].compiler else "")
    for other in run.also_chips:  # information beside the verdict: figures, and refusals as flags
        t1 = time.perf_counter()
        more, notes = chipcheck.compile_scales(other, programs, declared, memory_mb=run.memory_mb, strict=False)
        run.seconds["chip_compile"] += time.perf_counter() - t1
        run.compiled.extend(more)
        run.flags.extend(notes)
        ok = [r.scale for r in more if r.ok]
        run.compile_check += f"; also for {other.name} at {_scale_words(ok)}"


def _covered(run: _Run, compiled: list[str]) -> list[str]:
    """The compile-only scales (compiled for the chip) whose program runs the code a judged size ran: the envelope
    claims them. Each other one is flagged with the reason."""

    judged = [program.code_paths(run.exported[s]["cpu"]) for s in run.scales if "cpu" in run.exported.get(s, {})]
    envelope = Envelope.of(run.judged_task, run.suite)
    covered = []
    for scale in compiled:
        cpu = run.exported.get(scale, {}).get("cpu")
        statics = dict(zip((s.name for s in run.task.static), run.task.static_values(scale)))
        why = envelope.extends_to(run.task.shapes(scale), statics) or (
            "its CPU form could not be exported to compare" if cpu is None else program.paths_covered(program.code_paths(cpu), judged))
        if why:
            run.flags.append(f"scale {scale} compiled for {run.chip.name} but is not claimed: {why}")
        else:
            covered.append(scale)
    return covered


def _scale_words(scales: list[str]) -> str:
    """Scales in a line: the named ones, then the fresh sizes counted (their names are long and drawn anew)."""
    named = [s for s in scales if not s.startswith(FRESH)]
    fresh = len(scales) - len(named)
    words = named + ([f"{fresh} fresh size{'s' if fresh > 1 else ''}"] if fresh else [])
    return ", ".join(words) or "no scale"


def _ablate(run: _Run) -> None:
    """Rule 15: every kernel must change the result when its outputs are replaced, and the reference's
    work must run inside kernels (the judge's own variants of the target program, run on the CPU), at every scale
    the cases run: the suite's and the fresh sizes (a kernel honest only at sizes it can know is not)."""
    if run.target.host:
        return
    for scale in run.scales:
        n = run.programs[scale]["kernel_calls"]
        if not n:
            continue
        frozen = run.suite.for_scale(scale)
        case = frozen[0] if frozen else Case(scale, secrets.randbelow(2**31), "normal", note="fresh size")
        folder = _write_inputs(run, "ablate_" + scale, run.suite.inputs(run.task, case))
        reply = run.runner.ask({"op": "ablate", "scale": scale, "dir": _rel(run.runner, folder), "kernels": n},
                               run.timeouts.compile_s + run.timeouts.case_s * (n + 2), f"the kernel ablation at scale {scale}")
        shutil.rmtree(folder, ignore_errors=True)
        if not reply.get("ok"):  # never a pass by default: the kernels' work could not be checked
            raise _Verdict("unverifiable_here", f"the kernel ablation at scale {scale} could not run here "
                                                f"({_last_line(str(reply.get('error')))}), so the judge cannot show that "
                                                "the kernels do the work")
        dead = [k for k, changed in enumerate(reply["changed"]) if not changed]
        if dead:
            raise _Verdict("rejected", f"kernel {dead[0] + 1} of {n} does no work at scale {scale}: replacing its outputs by NaN "
                                       "leaves the result unchanged (an unused, dead-branch or overridden pallas_call)")
        outside, ref = reply.get("outside_flops"), reply.get("reference_flops")
        hidden = float(reply.get("outside_unknown_loops") or 0.0)
        if outside is not None and ref is not None:
            ref = max(float(ref), 1.0)
            if hidden > OUTSIDE_SHARE_FLAG * ref:
                raise _Verdict("rejected", f"work outside the kernels at scale {scale} runs in a loop whose trip count the "
                                           "judge cannot read: put the loop in a kernel, or make it a counted fori_loop")
            share = outside / ref
            # an epilogue of a couple of operations per output element (a cast, a compare, a bias) is no cheat,
            # even when the reference itself is hardly more than that
            out_elems = sum(int(np.prod(a.shape)) for a in run.exported[scale]["target"].out_avals)
            if share > OUTSIDE_SHARE_REJECT and outside > EPILOGUE_OPS_PER_OUTPUT * out_elems:
                raise _Verdict("rejected", f"{share:.0%} of the reference's FLOPs run outside the kernels at scale {scale} "
                                           f"({outside:.3g} of {ref:.3g}): the pallas_call must do the work, not XLA")
            if share > OUTSIDE_SHARE_FLAG:
                run.flags.append(f"scale {scale}: {share:.0%} of the reference's FLOPs run outside the kernels")


def _check_races(run: _Run) -> None:
    """Rules 5 and 18: at each suite scale, every TPU kernel runs again on a case from a secret seed in the TPU
    interpreter with race detection (in the tracer: its host callbacks cannot be exported; it costs ~20x a case),
    once per run of :data:`CHECK_RUNS` (mk.harness.tracer.CHECKS: as the cases; twice with "parallel" axes out of
    order, each with its own secret fill of unwritten memory, :mod:`mk.harness.poison`). It models what the HLO
    interpreter does not: DMA races, out-of-bounds block accesses, output blocks revisited after they were written
    back, state carried along a "parallel" axis, reads of memory never written. A race rejects; an error or a
    mismatch there counts as incorrect. A tracer could hide a finding, never invent a pass."""
    if run.target.interpreter != "tpu" or run.on_device:
        return
    for scale in run.suite.scales:  # with or without a CPU form (stop 33: without one, no fill run ran)
        if run.programs[scale].get("kernels"):
            # inputs from a secret seed: the suite's cases are public, and a kernel must not know which run checks it;
            # the garbage run's are the edges distribution's where the suite has it (zero rows with finite garbage in
            # unwritten memory: round 12, a kernel honest under a finite fill only on inputs without zero rows)
            seed = secrets.randbelow(2**31)
            edges = any(c.distribution == "edges" for c in run.suite.for_scale(scale))
            for check in CHECK_RUNS:
                dist = "edges" if check == "garbage" and edges else "normal"
                case = Case(scale, seed, dist, note="fresh seed")
                _run_one(run, len(run.suite.cases), case, run.tracer, "tracer interpreter",
                         f"TPU-interpreter check at scale {scale} (random seed {case.seed}, {dist} inputs"
                         f"{check_note(run.programs[scale], check)})", record=False, slow=20.0, tracer_run=check)


def _run_cases(run: _Run) -> None:
    """Each case: inputs generated here, the program run by the runner (or, for a kernel only the TPU
    interpreter runs, by the tracer), outputs compared here, files deleted."""
    forms = set()
    # the frozen cases, then one case per scale from a secret seed: the suite's seeds are public, so a candidate
    # could regenerate its inputs and memorise the answers; this input it cannot know (its seed is recorded)
    fresh = [Case(s, secrets.randbelow(2**31), "normal", note="fresh seed" if s in run.suite.scales else "fresh size")
             for s in run.scales]
    for i, case in enumerate([*run.suite.cases, *fresh]):
        who, form = _executor(run, case.scale)
        forms.add(form)
        label = {"fresh seed": "fresh random seed ", "fresh size": "fresh size, random seed "}.get(case.note, "seed ")
        _run_one(run, i, case, who, form, f"case {i} ({case.scale}, {label}{case.seed}, {case.distribution})",
                 slow=20.0 if who is run.tracer else 1.0)
    run.verified_by = ", ".join(sorted(forms))


def _run_claimed(run: _Run) -> None:
    """One case from a secret seed at each compile-only scale the envelope would claim (:func:`_covered`): the claim
    stands only on a number. Wrong there is the verdict (a declared size of the task); a case that cannot run here
    (too big for the judge's memory, past its deadline, a crash) leaves the size unclaimed, with a flag."""
    from mk.harness.suite import CASE_FOOTPRINT, reference_bytes

    for scale in list(run.covered):
        need = reference_bytes(run.task, scale)
        if need is None or need * CASE_FOOTPRINT > run.memory_mb << 20:
            run.covered.remove(scale)
            run.flags.append(f"scale {scale} compiled for {run.chip.name} but is not claimed: no case at this size fits the "
                             f"judge's {run.memory_mb / 1024:.1f} GiB here")
            continue
        case = Case(scale, secrets.randbelow(2**31), "normal", note="claimed size")
        who, form = _executor(run, scale)
        try:
            _run_one(run, len(run.cases), case, who, form, f"the case at declared scale {scale} (random seed {case.seed}, "
                     "normal; compiled only, run once so the envelope can claim it)", slow=20.0 if who is run.tracer else 1.0)
        except ChildFailed as exc:
            run.covered.remove(scale)
            run.flags.append(f"scale {scale} compiled for {run.chip.name} but is not claimed: its one case did not finish "
                             f"({exc.message})")


def _run_one(run: _Run, i: int, case: Case, who: Child, form: str, what: str, *, record: bool = True,
             slow: float = 1.0, tracer_run: str = "cases") -> None:
    """Run case ``i`` with ``who`` (the runner, or the tracer's TPU interpreter: its ``tracer_run``), compare,
    record. ``slow``: a factor on the interpreted-case deadline (race detection)."""
    run.failed_case = case.key  # cleared when the case passes
    inputs = run.suite.inputs(run.task, case)
    drawn = case.note.startswith("fresh") or case.scale not in run.suite.scales  # not a frozen case: computed now
    expected = _refs(run).compute(case.scale, inputs) if drawn else _refs(run).outputs(case, inputs)
    # the tracer's work dir is hostile (links, fifos): a fresh unpredictable name there
    name = f"case_{i:03d}" if who is run.runner else f"case_{i:03d}_{secrets.token_hex(8)}"
    folder = _write_inputs(run, name, inputs, into=None if who is run.runner else who.workdir)
    limit = case_limit(run, run.programs[case.scale].get("grid_steps"), slow)
    request = {"op": "case", "scale": case.scale, "dir": _rel(who, folder), "form": form} if who is run.runner else \
        {"op": "run", "scale": case.scale, "dir": _rel(who, folder), "form": form, "run": tracer_run,
         "seed": program.check_seed(run.programs[case.scale].get("parallel_axes") or [])}
    got, seconds = ask_outputs(run, who, folder, request, limit, what)
    cmp = _compare(run, case.scale, inputs, expected, got, what)
    if record:
        run.seconds[f"case_{i}"] = seconds
        run.cases.append(CaseResult(index=i, scale=case.scale, seed=case.seed, distribution=case.distribution, ok=cmp.ok,
                                    max_abs=cmp.max_abs, max_rel=cmp.max_rel, note=cmp.reason, key=case.key))
    if not cmp.ok:
        raise _Verdict("incorrect", f"{what}: {cmp.reason}")
    run.failed_case = ""


def _compare(run: _Run, scale: str, inputs: list[np.ndarray], expected: list[np.ndarray], got: list[np.ndarray],
             what: str) -> Comparison:
    """The task's tolerance; where it refuses, the fair rules (a bfloat16/float16 reference against itself in float32,
    a float32 reference against itself in float64), each stated in the verdict's flags when it passes a case."""
    cmp = compare_outputs(expected, got, run.task.tolerance)
    if cmp.ok or len(got) != len(expected):
        return _noted(run, cmp)
    if any(low_precision(e.dtype) for e in expected):
        f32 = _refs(run).compute_f32(scale, inputs)
        if f32 is not None:
            cmp = compare_fair(expected, f32, got, run.task.tolerance)
    elif any(e.dtype == np.float32 for e in expected):
        f64 = _refs(run).compute_f64(scale, inputs)
        if f64 is not None:
            cmp = compare_fair_f64(expected, f64, got, run.task.tolerance)
    if cmp.ok:
        run.flags.append(f"{what}: {cmp.reason}")
    return _noted(run, cmp)


def _noted(run: _Run, cmp: Comparison) -> Comparison:
    """``cmp``, its notes (a tolerance tightened so it can reject) added to the verdict's flags once per run."""
    for note in cmp.notes:
        flag = f"tolerance: {note}"
        if flag not in run.flags:
            run.flags.append(flag)
    return cmp


def _executor(run: _Run, scale: str) -> tuple[Child, str]:
    if run.on_device or run.target.host:
        return run.runner, "target"
    if run.programs[scale].get("cpu_file"):
        return run.runner, "cpu"
    return run.tracer, "tracer interpreter"


def _time_and_cost(run: _Run) -> tuple[TimingResult, CostResult | None]:
    cost = None
    if run.target.host or run.on_device:
        t0 = time.perf_counter()
        reply = run.runner.ask({"op": "cost", "scale": run.timed, "form": "target"}, run.timeouts.cost_s, "cost analysis")
        if reply.get("ok"):
            flops, nbytes = float(reply["flops"]), float(reply["bytes"])
            cost = CostResult(candidate_flops=flops if flops >= 0 else None, candidate_bytes=nbytes if nbytes >= 0 else None,
                              note="XLA cost analysis of the exported program (compiled by the judge's runner)")
        run.seconds["cost"] = time.perf_counter() - t0
    if not _wants_timing(run):
        return not_measured(_no_timing(run), run.timed), cost
    cases = [c for c in run.suite.cases if c.scale == run.timed]
    dist = cases[0].distribution
    sets: list[tuple[str, list[np.ndarray]]] = [(f"case {run.suite.cases.index(c)}", run.suite.inputs(run.task, c)) for c in cases]
    while len(sets) < MIN_INPUT_SETS or not any(name.startswith("fresh") for name, _ in sets):
        # fresh, unpredictable seeds: a candidate that recognises the frozen inputs is caught on the timed outputs
        sets.append(("fresh random seed", [np.asarray(x) for x in run.task.make_inputs(run.timed, secrets.randbelow(2**31), dist)]))
    dirs = [_rel(run.runner, _write_inputs(run, f"timing_{k}", x)) for k, (_, x) in enumerate(sets)]
    t0 = time.perf_counter()
    reply = run.runner.ask({"op": "time", "scale": run.timed, "dirs": dirs, "opts": run.timing_opts.to_spec(run.timed, dirs),
                            "form": "target"}, run.timeouts.timing_s, "timing")
    run.seconds["timing"] = time.perf_counter() - t0
    if not reply.get("ok"):
        return not_measured(f"not measured: timing failed ({_last_line(str(reply.get('error')))})", run.timed), cost
    refs = _refs(run)
    for k, (name, inputs) in enumerate(sets):
        got = load_arrays(run.runner.workdir / dirs[k], "out")
        cmp = _compare(run, run.timed, inputs, refs.compute(run.timed, inputs), got, f"timed run on input set {k}")
        if not cmp.ok:
            raise _Verdict("incorrect", f"timed run on input set {k} ({name}): {cmp.reason}")
    timing = summarize(np.asarray(reply["candidate"]), np.asarray(reply["reference"]), scale=run.timed, input_sets=len(sets))
    floor = None
    if timing.measured:
        cost, floor = _reference_cost(run, cost, sets[0][1])
    run.flags.extend(plausibility_flags(timing, floor))
    return timing, cost


# --- helpers -------------------------------------------------------------------------
def _refs(run: _Run) -> ReferenceCache:
    if run.refs is None:
        run.refs = ReferenceCache(run.task)
    return run.refs


def _spec(run: _Run) -> dict[str, Any]:
    task = run.task
    scales = []
    for name in (*run.scales, *run.compile_scales):
        try:
            static = [encode_static(v) for v in task.static_values(name)]
        except TypeError as exc:
            raise TaskError(f"task {task.name!r}: {exc}", hint="use JSON-able static values (numbers, strings, tuples, dtypes)") from None
        structs = [[list(s.shape), np.dtype(s.dtype).name] for s in task.arg_structs(name)]
        scales.append({"name": name, "static": static, "structs": structs, "compile_only": name not in run.scales,
                       "optional": name in run.scales and _optional(run, name)})
    from mk.harness import gradient

    chip = {"chip": run.chip.name} if run.chip is not None and run.target.assumes_chip else {}
    garbage = {"garbage_seed": fill_seed()} if run.target.interpreter == "tpu" else {}  # poison.seed
    return {**chip, **garbage, "entry": run.cand.entry, "target": run.target.name, "config": run.config,
            "static_as_kwargs": task.static_as_kwargs, "static_names": [s.name for s in task.static], "scales": scales,
            **gradient.spec_fields(run)}


def fill_seed() -> int:
    """The secret seed of the TPU-interpreter check's fills of unwritten memory (mk.harness.poison.seed, in the
    tracer): a fresh one per judgement (tests fix it to give one run a chosen family)."""
    return secrets.randbelow(2**31)


def _judged_envelope(task: Task, run: _Run, frozen: FrozenSuite, compiled: dict[str, Any] | None = None) -> dict[str, Any]:
    """The envelope of the cases that ran (``run.suite``: the frozen suite, less the sizes :func:`_narrow` left out),
    with the compile-only points the verdict claims, naming the frozen suite (its hash re-judges the kernel)."""
    return replace(Envelope.of(task, run.suite, compiled=compiled), suite_hash=frozen.hash).to_dict()


def _envelope(task: Task, suite: FrozenSuite) -> dict[str, Any]:
    """What a verdict verified (:class:`mk.harness.envelope.Envelope`): shapes, dtypes, statics, tolerance, cases."""
    return Envelope.of(task, suite).to_dict()


def _structure_mismatch(want: Any, exported: Any) -> str | None:
    import jax

    tree = jax.tree_util.tree_structure(want)
    if tree != exported.out_tree:
        return f"the output structure {exported.out_tree} differs from the reference's {tree}"
    for k, (w, got) in enumerate(zip(jax.tree_util.tree_leaves(want), exported.out_avals)):
        if tuple(w.shape) != tuple(got.shape) or np.dtype(w.dtype) != np.dtype(got.dtype):
            return (f"output {k} is {np.dtype(got.dtype).name}{list(got.shape)}, the reference's is "
                    f"{np.dtype(w.dtype).name}{list(w.shape)}")
    return None


def _estimate(run: _Run) -> Any:
    """The estimated speedup over XLA at the largest size the verdict judged, claims, or compiled for the chip (a
    declared size such as ``full`` under ``--scale ci``: the size the user runs, labelled not judged there unless
    claimed) (:mod:`mk.harness.estimate`); a flag with the reason, never the verdict, when it cannot be had."""
    from mk.harness import estimate

    if run.chip is None or run.chip.kind != "tpu" or not any(c.ok for c in run.compiled):
        return None
    declared = {**run.task.compile_only, **run.task.scales}
    judged = {*run.suite.scales, *run.covered}
    mine = [c for c in run.compiled if c.ok and c.chip == run.chip.name]
    compiled = {c.scale for c in mine if c.scale in run.compile_scales}
    scales = {s: declared[s] for s in sorted({*judged, *compiled}) if s in declared}
    t0 = time.perf_counter()
    try:
        found = estimate.for_verdict(run.task, run.device_programs, run.chip, scales,
                                     reference=lambda scale: _refs(run).export(scale, (run.target.platform,)),
                                     memory_mb=run.memory_mb, compiled_s={c.scale: c.seconds for c in mine})
        return found.model_copy(update={"judged": found.scale in judged})
    except estimate.NoEstimate as exc:
        run.flags.append(f"no speed estimate on {run.chip.name}: {_last_line(str(exc))}")
    except (ChildFailed, MkError) as exc:
        run.flags.append(f"no speed estimate on {run.chip.name}: {_last_line(str(getattr(exc, 'reason', exc)))}")
    except Exception as exc:  # noqa: BLE001 - information beside the verdict: never its cause
        log.warning("no speed estimate for %s", run.task.name, exc_info=True)
        run.flags.append(f"no speed estimate on {run.chip.name}: {type(exc).__name__}: {_last_line(str(exc))}")
    finally:
        run.seconds["estimate"] = time.perf_counter() - t0
    return None


def _wants_timing(run: _Run) -> bool:
    return not _no_timing(run)


def _no_timing(run: _Run) -> str:
    if not run.measure:
        return "not timed: timing was not asked for (a validation run, or mk eval --no-time)"
    if not run.target.can_time():
        return (f"not measured: no {run.target.name} device here (correctness ran in {run.target.mode()} mode); "
                "a speedup needs the real device")
    return ""


def _child_verdict(run: _Run, exc: ChildFailed) -> tuple[str, str]:
    where = exc.message
    if exc.outcome == "timeout":
        return "timeout", where
    if _oom(exc.log_tail) or "memory limit" in where:
        return "crashed", where if "memory" in where else f"{where}: out of memory"
    tail = _last_line(exc.log_tail)
    return "crashed", f"{where}{f' (log: {tail[-300:]})' if tail else ''}"


def _compile_step(run: _Run, status: str) -> StepResult:
    ok = bool(run.programs) and status not in ("compile_error",)
    secs = sum(v for k, v in run.seconds.items() if k in ("import", "chip_compile") or k.startswith("compile"))
    detail = run.compile_detail + (f"; {run.compile_check}" if run.compile_check else "")
    return StepResult(name="compile", ok=ok if run.programs or status == "compile_error" else None, seconds=secs,
                      detail=detail if ok else "did not compile" if status == "compile_error" else "not run")


def _correctness_step(run: _Run, status: str) -> StepResult:
    n = len(run.suite.cases) + len(run.scales)  # the frozen cases, one fresh-seed case per scale and the fresh size
    passed = sum(c.ok for c in run.cases)
    ran = bool(run.cases) or status == "correct"
    return StepResult(name="correctness", ok=(passed == n and status == "correct") if ran else None,
                      seconds=sum(v for k, v in run.seconds.items() if k.startswith("case_")),
                      detail=f"{passed}/{n} cases passed" + (f" ({run.verified_by})" if run.verified_by else "") if ran else "not run")


def _timeouts(given: Mapping[str, float]) -> Timeouts:
    """``{"compile": 90, "case_s": 10}`` -> Timeouts; a ConfigError naming the phases for an unknown key."""
    values = {f"{k.removesuffix('_s')}_s": float(v) for k, v in given.items()}
    known = {f.name for f in dataclasses.fields(Timeouts)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown timeout phase(s) {unknown}", hint=f"use any of {sorted(known)} (seconds)")
    return Timeouts(**values)


def _as_candidate(candidate: Candidate | str | Path) -> Candidate:
    if isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, Path) or (isinstance(candidate, str) and "\n" not in candidate):
        return load_candidate(candidate)
    return Candidate.from_source(candidate)


def _reference_cost(run: _Run, cost: CostResult | None, inputs: list[np.ndarray]) -> tuple[CostResult | None, float | None]:
    """The judge's own XLA cost of the reference, and the roofline floor where the hardware is known."""
    import jax

    task, scale = run.task, run.timed
    try:
        analysis = jax.jit(task.bind(task.reference, scale)).lower(*task.arg_structs(scale)).compile().cost_analysis()
        analysis = analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis or {}
        rflops, rbytes = float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0))
    except Exception as exc:  # noqa: BLE001 - cost is informational; never fail a verdict over it
        log.info("reference cost analysis failed: %s", exc)
        return cost, None
    cost = (cost or CostResult()).model_copy(update={"reference_flops": rflops, "reference_bytes": rbytes})
    floor = _roofline_floor(run, rflops, inputs)
    if floor is not None:
        cost = cost.model_copy(update={"roofline_floor_s": floor})
    return cost, floor


def _roofline_floor(run: _Run, flops: float, inputs: list[np.ndarray]) -> float | None:
    from mk import hardware

    kind = run.target.device_kind()
    spec = hardware.spec_for_device_kind(kind) if kind else None
    if spec is None or spec.approximate:
        return None
    import jax

    outs = jax.eval_shape(run.task.bind(run.task.reference, run.timed), *run.task.arg_structs(run.timed))
    io = sum(x.nbytes for x in inputs) + sum(int(np.prod(o.shape)) * np.dtype(o.dtype).itemsize for o in jax.tree_util.tree_leaves(outs))
    dtype = next((x.dtype.name for x in inputs if x.dtype.kind in "fV"), "float32")
    try:
        return hardware.roofline_seconds(max(flops, 0.0), float(io), spec, dtype)
    except MkError as exc:
        log.info("no roofline floor: %s", exc)
        return None


def _no_cost(run: _Run) -> str:
    if not run.target.host and not run.target.device_present():
        return f"not computed: the {run.target.name} kernel runs interpreted here, so an XLA cost would not describe it"
    return "not run"


def _timing_detail(t: TimingResult) -> str:
    if not t.measured:
        return t.reason
    return f"speedup {t.speedup:.3g}x (candidate {t.candidate_median_s:.3g} s, reference {t.reference_median_s:.3g} s, {t.runs} runs)"


def _whole_error(reply: Mapping[str, Any]) -> str:
    """The tracer's whole error for an author's fixer: the message in full (the shape that explains a lowering
    error is often past its first line) and the candidate's own lines of the traceback, innermost last. The text is
    the candidate's process's claim: it goes to the author only, never into a verdict."""
    full = str(reply.get("error", "unknown error")).strip()
    frames = [str(f) for f in reply.get("frames") or [] if isinstance(f, str)][-12:]
    where = "\n\nThe candidate's own lines in the traceback (innermost last):\n" + "\n".join(frames) if frames else ""
    at = f" (phase {reply.get('phase', 'compile')}, scale {reply['scale']})" if reply.get("scale") else ""
    return (full[:6000] + where)[:8000] + at


def _steps(*given: StepResult) -> list[StepResult]:
    by_name = {s.name: s for s in given}
    return [by_name.get(n, StepResult(name=n, detail="not run")) for n in ("static", "compile", "correctness", "timing", "cost")]
