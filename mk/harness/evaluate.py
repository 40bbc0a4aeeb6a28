"""``evaluate``: the judge. Static check → sandboxed worker (compile, correctness
cases, cost, timing) → verdict computed here, from arrays only.

Each step is a small function returning a :class:`StepResult`; the verdict
(``EvalResult.status``) is decided in this process, never by the candidate's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mk.candidate import Candidate, load_candidate
from mk.errors import CandidateError, ConfigError, MkError, TaskError
from mk.harness.compare import check_inputs, compare_outputs
from mk.harness.results import CaseResult, CostResult, EvalResult, StepResult, TimingResult
from mk.harness.sandbox import Sandbox, Timeouts, WorkerRun, prepare_workdir, remove_workdir
from mk.harness.suite import Case, FrozenSuite, ReferenceCache, build_suite
from mk.harness.timing import MIN_INPUT_SETS, TimingOptions, not_measured, plausibility_flags, summarize
from mk.harness.worker import OUT_DIR, encode_static, load_arrays, load_indexed
from mk.targets import Target, get_target
from mk.task import Task

log = logging.getLogger(__name__)

_OOM_MARKERS = ("MemoryError", "RESOURCE_EXHAUSTED", "Out of memory", "std::bad_alloc")


def static_step(candidate: Candidate, task: Task, target: str, require_pallas: bool) -> StepResult:
    """Rules 1, 2, 8 (first line): the source is checked before anything runs."""
    from mk.harness.static import check_source

    t0 = time.perf_counter()
    names = (task.source.stem,) if task.source is not None else ()
    found = check_source(candidate.source, target=target, require_pallas=require_pallas, task_names=names)
    return StepResult(name="static", ok=found.ok, seconds=time.perf_counter() - t0, detail=found.reason or "passed")


@dataclass
class _Plan:
    """Everything the judge prepared for one worker run."""

    task: Task
    target: Target
    suite: FrozenSuite
    inputs: list[list[np.ndarray]]
    refs: list[list[np.ndarray]]
    timed_scale: str
    timing_reason: str = ""  # empty: timing runs
    timing_sets: int = 0
    timing_inputs: dict[str, list[np.ndarray]] = field(default_factory=dict)  # timing dir -> inputs, in timing order
    verdicts: dict[int, CaseResult] = field(default_factory=dict)


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
) -> EvalResult:
    """Judge ``candidate`` on ``task`` for ``target``.

    ``scale``: restrict correctness to that scale and time there (default: the
    suite covers every scale; timing at the task's default scale).
    ``require_pallas`` defaults to True for tpu/gpu. ``config`` is passed to
    the entry as keyword tunables. Never raises for anything the candidate
    does; raises :class:`TaskError`/:class:`CandidateError` for bad inputs."""
    started = time.perf_counter()
    cand = _as_candidate(candidate)
    tgt = get_target(target)
    require_pallas = tgt.name != "cpu" if require_pallas is None else bool(require_pallas)
    if isinstance(timeouts, Mapping):
        timeouts = _timeouts(timeouts)
    if config:
        unknown = set(config) - set(cand.config_space) if cand.config_space else set()
        if unknown:
            raise CandidateError(f"config keys {sorted(unknown)} are not in the candidate's CONFIG_SPACE", hint=f"use {sorted(cand.config_space)}")

    static = static_step(cand, task, tgt.name, require_pallas)
    if suite is None:
        suite = build_suite(task, scales=[scale] if scale else None)
    elif suite.task_fingerprint != task.fingerprint():
        raise TaskError(f"the suite was frozen for another version of task {task.name!r}", hint="rebuild it with build_suite(task)")
    timed = scale or (task.default_scale if task.default_scale in suite.scales else suite.scales[0])
    if timed not in suite.scales:
        raise TaskError(f"scale {timed!r} is not in the suite (it has {', '.join(suite.scales)})", hint="build the suite with that scale")
    base = dict(task=task.name, target=tgt.name, scales=list(suite.scales), suite_hash=suite.hash, candidate_digest=cand.digest)
    if not static.ok:
        return EvalResult(status="rejected", reason=static.detail, steps=_steps(static), seconds=time.perf_counter() - started, **base)

    plan = _prepare(task, tgt, suite, timed, measure)
    spec = _spec(cand, plan, require_pallas, dict(config or {}), timing or TimingOptions())
    timing_dirs = spec["timing"]["dirs"] if spec.get("timing") else []
    dist = suite.for_scale(timed)[0].distribution
    # timing-only input sets come from fresh, unpredictable seeds: a candidate that recognises the frozen
    # inputs (a lookup table keyed on input values) is caught when the judge checks the timed outputs
    extra = {d: [np.asarray(x) for x in task.make_inputs(timed, secrets.randbelow(2**31), dist)]
             for d in timing_dirs if d.startswith("timing")}
    by_dir = {f"case_{i:03d}": x for i, x in enumerate(plan.inputs)}
    plan.timing_inputs = {d: extra[d] if d in extra else by_dir[d] for d in timing_dirs}
    reference = ReferenceCache(task).export(timed, ("cpu", tgt.platform)) if spec.get("timing") else None
    workdir = prepare_workdir(cand.source, spec, plan.inputs, reference, extra_inputs=extra)
    try:
        env = {"JAX_PLATFORMS": "cpu"} if tgt.name == "cpu" else {}
        run = Sandbox(workdir, timeouts=timeouts, memory_limit_mb=memory_limit_mb, env=env).run(lambda i: _judge_case(plan, workdir, i))
        result = _verdict(plan, run, workdir, static, base)
    finally:
        remove_workdir(workdir)
    return result.model_copy(update={"seconds": time.perf_counter() - started, "reason": _one_line(result.reason)})


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


def _prepare(task: Task, tgt: Target, suite: FrozenSuite, timed: str, measure: bool) -> _Plan:
    cache = ReferenceCache(task)
    inputs = [suite.inputs(task, c) for c in suite.cases]
    refs = [cache.outputs(c, x) for c, x in zip(suite.cases, inputs)]
    if not measure:
        reason = "timing not requested (--no-time)"
    elif not tgt.can_time():
        reason = f"not measured: no {tgt.name} device here (correctness ran in {tgt.mode()} mode); a speedup needs the real device"
    else:
        reason = ""
    return _Plan(task, tgt, suite, inputs, refs, timed, reason)


def _spec(cand: Candidate, plan: _Plan, require_pallas: bool, config: dict[str, Any], opts: TimingOptions) -> dict[str, Any]:
    task = plan.task
    scales = []
    for name in plan.suite.scales:
        try:
            static = [encode_static(v) for v in task.static_values(name)]
        except TypeError as exc:
            raise TaskError(f"task {task.name!r}: {exc}", hint="use JSON-able static values (numbers, strings, tuples, dtypes)") from None
        structs = [[list(s.shape), np.dtype(s.dtype).name] for s in task.arg_structs(name)]
        scales.append({"name": name, "static": static, "structs": structs})
    cases = [{"dir": f"case_{i:03d}", "scale": c.scale} for i, c in enumerate(plan.suite.cases)]
    spec: dict[str, Any] = {
        "entry": cand.entry, "target": plan.target.name, "require_pallas": require_pallas, "config": config,
        "static_as_kwargs": task.static_as_kwargs, "static_names": [s.name for s in task.static],
        "scales": scales, "cases": cases, "timing": None, "cost": None,
    }
    if plan.target.name == "cpu" or plan.target.device_present():
        spec["cost"] = {"scale": plan.timed_scale}
    if not plan.timing_reason:
        dirs = [cases[i]["dir"] for i, c in enumerate(plan.suite.cases) if c.scale == plan.timed_scale]
        dirs += [f"timing_{k}" for k in range(max(1, MIN_INPUT_SETS - len(dirs)))]  # at least one fresh set
        spec["timing"] = opts.to_spec(plan.timed_scale, dirs)
        plan.timing_sets = len(dirs)
    return spec


def _describe(case: Case, i: int) -> str:
    return f"case {i} ({case.scale}, seed {case.seed}, {case.distribution})"


def _judge_case(plan: _Plan, workdir: Path, i: int) -> bool:
    """Compare case ``i`` as soon as the worker has written it; False stops the worker."""
    if not 0 <= i < len(plan.suite.cases) or i in plan.verdicts:
        return False  # a message no honest worker sends
    case = plan.suite.cases[i]
    folder = workdir / OUT_DIR / f"case_{i:03d}"
    base = dict(index=i, scale=case.scale, seed=case.seed, distribution=case.distribution)
    try:
        outputs = load_arrays(folder, "out")
        after = load_indexed(folder, "in")
    except (OSError, ValueError) as exc:
        plan.verdicts[i] = CaseResult(ok=False, note=f"unreadable outputs: {exc}", **base)
        return False
    got = compare_outputs(plan.refs[i], outputs, plan.task.tolerance)
    mutated = check_inputs(plan.inputs[i], after)
    note = mutated or got.reason
    plan.verdicts[i] = CaseResult(ok=got.ok and mutated is None, max_abs=got.max_abs, max_rel=got.max_rel, note=note, **base)
    return plan.verdicts[i].ok


def _verdict(plan: _Plan, run: WorkerRun, workdir: Path, static: StepResult, base: dict[str, Any]) -> EvalResult:
    cases = [plan.verdicts[i] for i in sorted(plan.verdicts)]
    n = len(plan.suite.cases)
    secs = run.seconds
    compile_ok = "compile" in secs
    log_line = run.stderr_tail.splitlines()[-1] if run.stderr_tail and run.outcome == "crashed" else ""
    compile_step = StepResult(name="compile", ok=compile_ok, seconds=secs.get("import", 0.0) + secs.get("compile", 0.0),
                              detail="lowered for " + plan.target.platform if compile_ok else _join(run.message or run.outcome, log_line))
    if run.phase in ("import", "compile") and run.outcome != "finished" and not compile_ok:
        status = {"failed": "compile_error", "rejected": "rejected"}.get(run.outcome, run.outcome)
        what = "failed to import" if run.phase == "import" else f"failed the {plan.target.name} compile check"
        reason = run.message if run.outcome == "rejected" else f"candidate {what}: {run.message}"
        if run.outcome in ("timeout", "crashed"):
            reason = f"{run.outcome} during {run.phase}: {run.message}"
        if _oom(run.message):
            status, reason = "crashed", f"out of memory during {run.phase}: {run.message}"
        return EvalResult(status=status, reason=reason, steps=_steps(static, compile_step, StepResult(name="correctness")),
                          cases=cases, **base)
    bad = next((c for c in cases if not c.ok), None)
    correctness = StepResult(name="correctness", ok=bad is None and len(cases) == n,
                             seconds=sum(v for k, v in secs.items() if k.startswith("case_")),
                             detail=_join(f"{sum(c.ok for c in cases)}/{n} cases passed", log_line))
    status, reason = "correct", f"all {n} cases match the reference"
    if bad is not None:
        status, reason = "incorrect", f"{_describe(plan.suite.cases[bad.index], bad.index)}: {bad.note}"
    elif len(cases) < n:  # the worker stopped before every case was judged
        where = _describe(plan.suite.cases[run.index], run.index) if run.phase == "case" and run.index < n else run.phase
        if run.outcome == "failed" and _oom(run.message):
            status, reason = "crashed", f"{where} ran out of memory: {run.message}"
        elif run.outcome == "failed":
            status, reason = "incorrect", f"{where} raised {run.message}"
        elif run.outcome == "timeout":
            status, reason = "timeout", f"{where}: {run.message}"
        elif run.outcome in ("crashed", "rejected"):
            status, reason = run.outcome, run.message
        else:
            status, reason = "crashed", f"the worker ended after {len(cases)} of {n} cases ({run.outcome})"
    elif run.outcome in ("timeout", "crashed", "rejected"):
        status, reason = run.outcome, run.message
    if status == "correct" and "timing" in secs:
        wrong = _check_timed_outputs(plan, workdir)
        if wrong:
            status, reason = "incorrect", wrong
    timing_res, cost_res, flags = _timing_and_cost(plan, run, workdir, status == "correct")
    steps = _steps(static, compile_step, correctness,
                   StepResult(name="timing", ok=None if plan.timing_reason or status != "correct" else timing_res.measured,
                              seconds=secs.get("timing", 0.0),
                              detail=_timing_detail(timing_res)),
                   StepResult(name="cost", ok=(cost_res is not None and cost_res.candidate_flops is not None) or None,
                              seconds=secs.get("cost", 0.0), detail=cost_res.note if cost_res else _no_cost(plan)))
    return EvalResult(status=status, reason=reason, steps=steps, cases=cases, timing=timing_res, cost=cost_res, flags=flags, **base)


def _check_timed_outputs(plan: _Plan, workdir: Path) -> str | None:
    """What the candidate returned in its timed runs must match the reference too (a candidate that computes
    honestly for the cases and cheaply for the timing, or only on inputs it recognises, is incorrect)."""
    cache = ReferenceCache(plan.task)
    refs_by_dir = {f"case_{i:03d}": r for i, r in enumerate(plan.refs)}
    for k, (d, inputs) in enumerate(plan.timing_inputs.items()):
        where = f"timed run on input set {k} ({'fresh random seed' if d.startswith('timing') else d})"
        try:
            outputs = load_arrays(workdir / OUT_DIR / "timing" / f"set_{k}", "out")
        except (OSError, ValueError) as exc:
            return f"{where}: outputs missing or unreadable ({exc})"
        refs = refs_by_dir.get(d) or cache.compute(plan.timed_scale, inputs)
        got = compare_outputs(refs, outputs, plan.task.tolerance)
        if not got.ok:
            return f"{where}: {got.reason}"
    return None


def _timing_and_cost(plan: _Plan, run: WorkerRun, workdir: Path, correct: bool) -> tuple[TimingResult, CostResult | None, list[str]]:
    out = workdir / OUT_DIR
    cost = _read_cost(out / "cost.json", run)
    if plan.timing_reason:
        return not_measured(plan.timing_reason, plan.timed_scale), cost, []
    if not correct:
        return not_measured("not measured: the candidate is not correct", plan.timed_scale), cost, []
    if "timing" not in run.seconds:
        return not_measured(f"not measured: the worker did not finish timing ({run.message or run.outcome})", plan.timed_scale), cost, []
    try:
        cand, ref = load_arrays(out / "timing", "cand")[0], load_arrays(out / "timing", "ref")[0]
    except (OSError, ValueError, IndexError) as exc:
        return not_measured(f"not measured: timing samples unreadable ({exc})", plan.timed_scale), cost, []
    timing = summarize(cand, ref, scale=plan.timed_scale, input_sets=plan.timing_sets)
    floor = None
    if timing.measured:
        cost, floor = _reference_cost(plan, cost)
    return timing, cost, plausibility_flags(timing, floor)


def _read_cost(path: Path, run: WorkerRun) -> CostResult | None:
    if "cost" not in run.seconds:
        return None
    try:
        data = json.loads(path.read_text())
        flops, nbytes = float(data["flops"]), float(data["bytes"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return CostResult(note=f"cost analysis unreadable: {exc}")
    return CostResult(candidate_flops=flops if flops >= 0 else None, candidate_bytes=nbytes if nbytes >= 0 else None,
                      note="XLA cost analysis of the candidate compiled here (reported by the sandbox)")


def _reference_cost(plan: _Plan, cost: CostResult | None) -> tuple[CostResult | None, float | None]:
    """The judge's own XLA cost of the reference, and the roofline floor where the hardware is known."""
    import jax

    task, scale = plan.task, plan.timed_scale
    try:
        analysis = jax.jit(task.bind(task.reference, scale)).lower(*task.arg_structs(scale)).compile().cost_analysis()
        analysis = analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis or {}
        rflops, rbytes = float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0))
    except Exception as exc:  # cost is informational; never fail a verdict over it
        log.info("reference cost analysis failed: %s", exc)
        return cost, None
    cost = (cost or CostResult()).model_copy(update={"reference_flops": rflops, "reference_bytes": rbytes})
    floor = _roofline_floor(plan, rflops)
    if floor is not None:
        cost = cost.model_copy(update={"roofline_floor_s": floor})
    return cost, floor


def _roofline_floor(plan: _Plan, flops: float) -> float | None:
    from mk import hardware

    kind = plan.target.device_kind()
    spec = hardware.spec_for_device_kind(kind) if kind else None
    if spec is None or spec.approximate:
        return None
    i = next(k for k, c in enumerate(plan.suite.cases) if c.scale == plan.timed_scale)
    io = sum(x.nbytes for x in plan.inputs[i]) + sum(x.nbytes for x in plan.refs[i])  # compulsory traffic
    dtype = next((x.dtype.name for x in plan.inputs[i] if x.dtype.kind in "fV"), "float32")
    try:
        return hardware.roofline_seconds(max(flops, 0.0), float(io), spec, dtype)
    except MkError as exc:
        log.info("no roofline floor: %s", exc)
        return None


def _no_cost(plan: _Plan) -> str:
    if plan.target.name != "cpu" and not plan.target.device_present():
        return f"not computed: the {plan.target.name} kernel runs interpreted here, so an XLA cost would not describe it"
    return "not run"


def _timing_detail(t: TimingResult) -> str:
    if not t.measured:
        return t.reason
    return f"speedup {t.speedup:.3g}x (candidate {t.candidate_median_s:.3g} s, reference {t.reference_median_s:.3g} s, {t.runs} runs)"


def _one_line(text: str, limit: int = 400) -> str:
    """The reason is one line a person can act on: the first non-empty line, trimmed."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else text.strip()
    if len(lines) > 1 and first.endswith(":"):
        first = f"{first} {lines[1]}"
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _join(text: str, log_line: str) -> str:
    return f"{text} (worker log: {log_line[-300:]})" if log_line else text


def _oom(message: str) -> bool:
    return any(m in message for m in _OOM_MARKERS)


def _steps(*given: StepResult) -> list[StepResult]:
    by_name = {s.name: s for s in given}
    return [by_name.get(n, StepResult(name=n, detail="not run")) for n in ("static", "compile", "correctness", "timing", "cost")]
