"""LMAuthor: the DSPy sub-agents behind Auto's Author protocol.

One trajectory with a language model looks like::

    prepare  TestSynthesizer adds cases to the frozen suite (before any plan)
    plan     offline seed proposals first, then Planner (analysis, hardware,
             retrieved passages, measured feedback and history)
    implement Implementer -> code + CONFIG_SPACE
    fix      CompileFixer with passages retrieved for the error
    analyse  ProfileAnalyst -> feedback for the next plan, and stop-or-continue

Every sub-agent call runs with the author's LM (already wrapped by
:func:`mk.lm.accounted`, so its calls are budgeted and recorded) inside
:func:`mk.lm.agent_scope` and :func:`mk.lm.node_scope`.

Synthesised test cases: the harness's :class:`~mk.harness.suite.Case` is
(scale, seed, distribution), so a case with new shapes becomes an extra
:class:`~mk.task.Scale` with explicit ``shapes`` on the task
(:meth:`Task.with_scales`, named ``syn_<case name>``) plus a ``Case`` on
that scale; cases with the task's own shapes reuse that scale. Value edge
cases (zeros, ones, negative, small_magnitude, large_magnitude) are input
distributions of their own (:data:`mk.task.FLOAT_DISTRIBUTIONS`), drawn for
every floating input; ``odd_sizes`` is the case's shapes.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import dspy

from mk.author.proposal import Proposal
from mk.errors import AgentOutputError, BudgetExceeded, ConfigError, KnowledgeError, MkError
from mk.harness.suite import DEFAULT_DISTRIBUTIONS, DEFAULT_SEEDS, Case
from mk.lm import agent_scope, node_scope
from mk.profile import ProfileReport
from mk.programs.auto import Context, Plan
from mk.programs.validation import positional_count
from mk.task import Scale, Task

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_TEMPERATURE = 1.0  # for rollouts when neither the author nor the LM sets a temperature above 0

_TARGET_RULES = {
    "tpu": ("Write a Pallas TPU kernel (jax.experimental.pallas.pallas_call; jax.experimental.pallas.tpu for memory "
            "spaces): the judge requires a pallas_call on this target. The last two dims of every block must be "
            "divisible by 8 and 128 or equal the full array dims; pad or mask shapes that do not divide. Without a TPU "
            "the kernel is lowered for TPU and run in interpret mode, so correctness is checked but time is not."),
    "gpu": ("Write a Pallas Triton kernel (jax.experimental.pallas.pallas_call with "
            "compiler_params=jax.experimental.pallas.triton.CompilerParams(num_warps=..., num_stages=...)): the judge "
            "requires a pallas_call on this target. Block dims must be powers of two; mask the ragged edges."),
    "cpu": ("Pallas does not compile for a CPU: write a pure-JAX rewrite (jax.numpy / jax.lax) that XLA compiles into "
            "fewer or cheaper passes over memory than the reference."),
}


class Retriever(Protocol):
    def retrieve(self, query: str, k: int = 5) -> str: ...


# --- prompt inputs ------------------------------------------------------------------
def hardware_brief(target: str) -> str:
    """The target's spec (the present device's, else the default assumed one) and its kernel rules, as prompt text."""
    from mk.hardware import default_spec, spec_for_device_kind
    from mk.targets import get_target

    kind = None
    try:
        kind = get_target(target).device_kind()
    except MkError as exc:
        log.debug("no device kind for %s: %s", target, exc)
    spec = (spec_for_device_kind(kind) if kind else None) or default_spec(target)
    where = f"present: {kind}" if kind else "not present here; these are the assumed device's numbers"
    lines = [f"target {target}: {spec.full_name} ({where})"]
    peaks = ", ".join(f"{k} {v / 1e12:.4g} TFLOP/s" for k, v in spec.peak_flops.items() if v)
    if peaks:
        lines.append(f"peak: {peaks}")
    lines.append(f"HBM bandwidth {spec.hbm_bandwidth / 1e9:.4g} GB/s; ridge point {spec.ridge_point():.4g} FLOP/byte (bf16)")
    sizes = {"HBM": spec.hbm_bytes, "VMEM": spec.vmem_bytes, "SMEM": spec.smem_bytes, "CMEM": spec.cmem_bytes,
             "shared memory per SM": spec.shared_mem_per_sm_bytes, "L2": spec.l2_bytes}
    mem = ", ".join(f"{k} {v / 2**20:.4g} MiB" for k, v in sizes.items() if v)
    if mem:
        lines.append(f"memory: {mem}")
    if spec.cores:
        mxu = f", MXU {spec.mxu_size}x{spec.mxu_size}" if spec.mxu_size else ""
        lines.append(f"{spec.cores} {spec.core_kind or 'cores'}{mxu}")
    if spec.notes:
        lines.append(spec.notes)
    lines.append(_TARGET_RULES.get(target, ""))
    return "\n".join(x for x in lines if x)


def task_brief(task: Task, target: str) -> str:
    """Inputs, statics, the entry-point contract, the reference's source and the analysis, as prompt text."""
    from mk.programs.test_synthesizer import input_spec

    n = positional_count(task)
    statics = ("statics are passed as keyword arguments" if task.static_as_kwargs else
               "statics follow the inputs positionally") if task.static else "there are no statics"
    parts = [input_spec(task),
             f"entry point: `kernel` takes {n} positional argument(s) ({statics}) and returns what the reference returns; "
             f"tolerance atol={task.tolerance.atol}, rtol={task.tolerance.rtol}",
             "reference source:\n" + _source(task.reference)]
    try:
        from mk.analysis import analyze
        from mk.hardware import default_spec

        parts.append(analyze(task, specs=(default_spec(target).name,)).summary())
    except Exception as exc:  # the analysis is advisory; the prompt still has the source and shapes
        log.info("task analysis unavailable for %s: %s", task.name, exc)
        parts.append(f"(no analysis: {type(exc).__name__}: {exc})")
    return "\n\n".join(parts)


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(fn).strip()
    except (OSError, TypeError):
        return repr(fn)


# --- synthesised tests ----------------------------------------------------------------
@dataclass
class SynthesizedCases:
    """Extra cases for :func:`mk.harness.suite.build_suite` and the task that defines their scales."""

    task: Task
    cases: list[Case] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def synthesize_cases(task: Task, lm: Any, *, analysis: Any = "", attempts: int = 3, max_cases: int = 8) -> SynthesizedCases:
    """Ask the TestSynthesizer (with ``lm``) for cases and map them onto the harness (see the module docstring)."""
    from mk.programs.test_synthesizer import TestSynthesizer

    with dspy.context(lm=lm):
        synthesizer = TestSynthesizer(attempts=attempts, max_cases=max_cases)
        from mk.compiled import load_compiled

        load_compiled("test_synthesizer", synthesizer)
        proposed = synthesizer(task=task, analysis=analysis).test_cases
    by_shapes = {tuple(tuple(s) for s in task.shapes(name)): name for name in task.scales}
    existing = {(name, seed, dist) for name in task.scales for dist in DEFAULT_DISTRIBUTIONS for seed in DEFAULT_SEEDS}
    scales: dict[str, Scale] = {}
    out = SynthesizedCases(task)
    for tc in proposed:
        shapes = tuple(tuple(int(d) for d in s) for s in tc.shapes)
        scale = by_shapes.get(shapes)
        if scale is None:
            scale = _fresh_name(f"syn_{tc.name}", set(task.scales) | set(scales))
            scales[scale] = Scale(scale, shapes=shapes, static=dict(task.scale().static))
            by_shapes[shapes] = scale
        dist = tc.edge_case if tc.edge_case not in ("none", "odd_sizes") else tc.distribution
        key = (scale, int(tc.seed), dist)
        if key in existing:
            out.skipped.append(f"{tc.name}: the suite already has scale {scale} seed {tc.seed} {dist}")
            continue
        existing.add(key)
        out.cases.append(Case(scale, int(tc.seed), dist, note=f"synthesized: {tc.name}: {tc.rationale}"[:300]))
    if scales:
        out.task = task.with_scales({**task.scales, **scales})
    for note in out.skipped:
        log.info("test synthesis: %s", note)
    return out


def _fresh_name(base: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]+", "_", base)[:40]
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


# --- the author -----------------------------------------------------------------------
class LMAuthor:
    """Auto's Author backed by the DSPy sub-agents (see the module docstring).

    ``lm`` is a DSPy LM already wrapped by :func:`mk.lm.accounted`; ``knowledge``
    anything with ``retrieve(query, k) -> str`` (a KnowledgeStore) or None.
    ``seeds`` offers the offline author's proposals before the first LM plan.

    Independent samples: DSPy's response cache answers an identical prompt with
    the answer it already has. ``rollout`` (an int >= 0, settable between calls)
    makes every sub-agent call use ``lm.copy(rollout_id=..., temperature=...)``,
    so sample k draws its own answers (still cached under its own key, so a rerun
    replays it). ``temperature`` is the sampling temperature for such draws
    (default: the LM's own when above 0, else ``DEFAULT_SAMPLE_TEMPERATURE``):
    DSPy's rollout_id only changes what a provider generates at a temperature
    above 0. A planner call whose inputs repeat an earlier one of this author
    (an Auto loop that learned nothing new) also gets a rollout of its own.
    """

    def __init__(self, lm: Any, *, knowledge: Retriever | None = None, k: int = 5, seeds: bool = True,
                 synthesize_tests: bool = True, attempts: int = 3, model: str | None = None,
                 rollout: int | None = None, temperature: float | None = None):
        if temperature is not None and not temperature > 0:
            raise ConfigError(f"sampling temperature must be above 0, got {temperature}",
                              hint="rollouts only draw different answers at a temperature above 0; omit it for the default")
        from mk.programs.compile_fixer import CompileFixer
        from mk.programs.implementer import Implementer
        from mk.programs.planner import Planner
        from mk.programs.profile_analyst import ProfileAnalyst

        self.lm = lm
        self.knowledge = knowledge
        self.k = k
        self.model = model or str(getattr(lm, "model", "lm"))
        self.name = f"lm:{self.model}"
        self.seeds = seeds
        self.synthesize_tests = synthesize_tests
        self.planner = Planner(attempts=attempts)
        self.implementer = Implementer(attempts=attempts)
        self.fixer = CompileFixer(attempts=attempts)
        self.analyst = ProfileAnalyst(attempts=attempts)
        from mk.compiled import load_compiled

        for module in (self.planner, self.implementer, self.fixer, self.analyst):
            load_compiled(module.agent, module)  # prompts compiled by evals/compile.py, when present
        self.attempts = attempts
        self.rollout = rollout
        self.temperature = temperature
        self._plan_inputs: dict[str, int] = {}  # digest of the planner's inputs -> times asked
        self.seed_declined: dict[str, str] = {}  # why offline templates did not apply (not a stop reason here)
        self.stop_reason = ""
        self.skipped_cases: list[str] = []
        self._seed_queue: list[Proposal] | None = None
        self._briefs: dict[tuple[str, str], str] = {}
        self._lm_plans = 0

    # --- run plumbing ----------------------------------------------------------------
    def fork(self, *, rollout: int | None = None) -> "LMAuthor":
        """A fresh author for another trajectory (a search node): same LM, accounting and knowledge, new state;
        ``rollout`` makes its LM calls an independent sample (see the class docstring)."""
        return LMAuthor(self.lm, knowledge=self.knowledge, k=self.k, seeds=self.seeds, synthesize_tests=self.synthesize_tests,
                        attempts=self.attempts, model=self.model, rollout=rollout, temperature=self.temperature)

    @property
    def sample_temperature(self) -> float:
        """The temperature of a rollout draw: the author's, else the LM's when above 0, else the default."""
        if self.temperature is not None:
            return self.temperature
        lm_temp = (getattr(self.lm, "kwargs", None) or {}).get("temperature")
        return float(lm_temp) if lm_temp else DEFAULT_SAMPLE_TEMPERATURE

    def draw_lm(self, repeat: int = 0) -> Any:
        """The LM for one sub-agent call: ``self.lm`` itself (DSPy's cache may answer) unless this author samples a
        rollout or the call repeats inputs (``repeat`` > 0); then a copy with a distinct ``rollout_id``."""
        if self.rollout is None and repeat == 0:
            return self.lm
        k = 0 if self.rollout is None else self.rollout
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"rollout must be an int >= 0 or None, got {self.rollout!r}", hint="use the sample's index")
        if not callable(getattr(self.lm, "copy", None)):
            log.warning("%s has no copy(); its calls cannot draw independent samples", type(self.lm).__name__)
            return self.lm
        rollout_id = (k + repeat) * (k + repeat + 1) // 2 + repeat  # Cantor pairing: one id per (rollout, repeat)
        return self.lm.copy(rollout_id=rollout_id, temperature=self.sample_temperature)

    @property
    def accountant(self) -> Any:
        return getattr(self.lm, "_mk_accountant", None)

    @property
    def meter(self) -> Any:
        acc = self.accountant
        return acc.meter if acc is not None else None

    def bind_run(self, run_id: str | None) -> None:
        """Record the LM calls from now on under ``run_id``."""
        if self.accountant is not None and run_id:
            self.accountant.run_id = run_id

    def prepare(self, task: Task, target: str) -> tuple[Task, list[Case]]:
        """Synthesised test cases for the suite, before it is frozen: (task with any extra scales, extra cases).

        A synthesiser that gives no valid answer leaves the suite as it is (logged)."""
        if not self.synthesize_tests:
            return task, []
        try:
            with agent_scope("test_synthesizer"):
                syn = synthesize_cases(task, self.draw_lm(), analysis=self._brief(task, target), attempts=self.attempts)
        except (AgentOutputError, BudgetExceeded) as exc:  # a spent budget stops the run at Auto's first check
            log.warning("no synthesized test cases: %s", exc)
            return task, []
        self.skipped_cases = syn.skipped
        return syn.task, syn.cases

    # --- Author protocol ---------------------------------------------------------------
    def plan(self, ctx: Context) -> Plan | None:
        self._bind(ctx)
        if self.stop_reason:
            return None
        if self.seeds and self._seed_queue is None:
            self._seed_queue = self._offline_seeds(ctx)
        if self._seed_queue:
            seed = self._seed_queue.pop(0)
            return Plan(seed.name, seed.rationale, seed)
        brief = self._brief(ctx.task, ctx.target)
        feedback = ctx.feedback
        history = "\n".join(s.summary() for s in ctx.history)
        passages = self._retrieve(f"{ctx.task.name} {ctx.target} pallas kernel\n{brief[:400]}\n{feedback[-300:]}")
        digest = hashlib.sha256("\0".join([str(self.rollout), brief, ctx.target, passages, feedback, history]).encode()).hexdigest()
        repeat = self._plan_inputs.get(digest, 0)
        self._plan_inputs[digest] = repeat + 1
        try:
            with node_scope(self._node(ctx)), agent_scope(self.planner.agent), dspy.context(lm=self.draw_lm(repeat)):
                plan = self.planner(task_analysis=brief, hardware=hardware_brief(ctx.target), passages=passages,
                                    feedback=feedback, history=history).plan
        except AgentOutputError as exc:
            self.stop_reason = f"the planner gave no valid plan: {exc}"
            log.warning(self.stop_reason)
            return None
        self._lm_plans += 1
        return Plan(f"lm-{plan.approach}-{self._lm_plans}", _plan_text(plan), plan)

    def implement(self, ctx: Context, plan: Plan) -> Proposal:
        if isinstance(plan.data, Proposal):
            return plan.data
        typed = plan.data
        if typed is None:  # a plan written by hand (HITL): let the planner's schema carry its text
            from mk.signatures import Plan as TypedPlan

            typed = TypedPlan(approach="pallas" if ctx.target != "cpu" else "jax", strategy=plan.text, expected_speedup=1.0)
        passages = self._retrieve(f"{typed.approach} {typed.strategy} {typed.memory_placement} {typed.pipelining}")
        with node_scope(self._node(ctx)), agent_scope(self.implementer.agent), dspy.context(lm=self.draw_lm()):
            impl = self.implementer(task_analysis=self._brief(ctx.task, ctx.target), plan=typed,
                                    hardware=hardware_brief(ctx.target), passages=passages, task=ctx.task).implementation
        return Proposal(plan.name, impl.code, plan.text, "lm")

    def fix(self, ctx: Context, proposal: Proposal, error: str) -> Proposal | None:
        passages = self._retrieve(error[-1500:])
        try:
            with node_scope(self._node(ctx)), agent_scope(self.fixer.agent), dspy.context(lm=self.draw_lm()):
                out = self.fixer(error=error, code=proposal.source, passages=passages, task=ctx.task)
        except AgentOutputError as exc:
            log.warning("no fix for %s: %s", proposal.name, exc)
            return None
        return Proposal(proposal.name, out.implementation.code, f"{proposal.rationale} (fixed: {out.explanation})",
                        proposal.template)

    def analyse(self, ctx: Context, report: ProfileReport) -> str:
        history = "\n".join(s.summary() for s in ctx.history)
        try:
            with node_scope(self._node(ctx)), agent_scope(self.analyst.agent), dspy.context(lm=self.draw_lm()):
                a = self.analyst(profile=report.summary(), task_analysis=self._brief(ctx.task, ctx.target),
                                 hardware=hardware_brief(ctx.target), history=history).analysis
        except AgentOutputError as exc:
            log.warning("no profile analysis: %s", exc)
            return f"profile analysis unavailable; {report.bound or 'unknown'}-bound"
        text = f"{a.bottleneck}-bound: {a.evidence}"
        if a.decision == "stop":
            self.stop_reason = f"the profile analyst decided to stop ({a.evidence})"
            return text + "; analyst: stop"
        return text + f"; next: {a.next_step} (expected {a.expected_gain:.2g}x)"

    # --- helpers ---------------------------------------------------------------------------
    def _bind(self, ctx: Context) -> None:
        run_id = getattr(ctx, "run_id", None)
        if run_id:
            self.bind_run(run_id)

    @staticmethod
    def _node(ctx: Context) -> str | None:
        """The in-flight node when Auto's context carries it, else the parent (the last snapshot's node)."""
        node = getattr(ctx, "node_id", None)
        if node:
            return node
        return next((s.node_id for s in reversed(ctx.history) if s.node_id), None)

    def _brief(self, task: Task, target: str) -> str:
        key = (task.fingerprint(), target)
        if key not in self._briefs:
            self._briefs[key] = task_brief(task, target)
        return self._briefs[key]

    def _offline_seeds(self, ctx: Context) -> list[Proposal]:
        from mk.author import OfflineAuthor

        try:
            authored = OfflineAuthor().propose(ctx.task, ctx.target)
        except MkError as exc:
            log.info("no offline seed proposals: %s", exc)
            return []
        self.seed_declined = dict(authored.declined)
        return list(authored.proposals)

    def _retrieve(self, query: str) -> str:
        if self.knowledge is None:
            return ""
        try:
            return self.knowledge.retrieve(query, self.k)
        except (KnowledgeError, OSError, ValueError) as exc:
            log.warning("knowledge retrieval failed (the author goes on without passages): %s", exc)
            return ""


def _plan_text(plan: Any) -> str:
    parts = [f"[{plan.approach}] {plan.strategy.strip()}"]
    if plan.tiling:
        parts.append(f"tiling {plan.tiling}")
    if plan.memory_placement:
        parts.append(f"memory: {plan.memory_placement}")
    if plan.pipelining:
        parts.append(f"pipelining: {plan.pipelining}")
    parts.append(f"expected {plan.expected_speedup:.2g}x")
    return "; ".join(parts)
