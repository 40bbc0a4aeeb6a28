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
:func:`mk.scopes.agent_scope` and :func:`mk.scopes.node_scope`.

Synthesised test cases: the harness's :class:`~mk.harness.suite.Case` is
(scale, seed, distribution), so a case with new shapes becomes an extra
:class:`~mk.task.Scale` with explicit ``shapes`` on the task
(:meth:`Task.with_scales`, named ``syn_<case name>``) plus a ``Case`` on
that scale; cases with the task's own shapes reuse that scale. Value edge
cases (zeros, ones, negative, small_magnitude, large_magnitude) are input
distributions of their own (:data:`mk.task.FLOAT_DISTRIBUTIONS`), drawn for
every floating input; ``odd_sizes`` is the case's shapes.

What each sub-agent sees (no channel twice, no call that cannot matter):

- planner: the task brief, the hardware brief, passages, ``history`` (one line
  per earlier iteration, each plan named by its content: :func:`plan_name`),
  ``feedback`` (the previous round's measured profile and analysis, and a
  search's notes) and ``kernels`` (the best kernel so far with its speedup and
  the latest failing one with its verdict: :func:`kernels_text`). A plan that
  repeats one already tried (same content name) is asked again with the
  repeats listed, and never reaches the implementer.
- implementer: the plan, the briefs, passages and the same ``kernels``; a plan
  implemented before draws a fresh sample (a rollout id), not DSPy's cached answer.
- fixer: the judge's whole error (its tail, :data:`mk.programs.compile_fixer.ERROR_CHARS`)
  with the candidate's own lines it points at, the input shapes, the hardware
  brief, the plan, and the earlier fix attempts for this candidate.
- analyst: only when the candidate was timed; otherwise its note says so
  and no call is made.

Without a device of the target (nothing can be timed) the author stops after
the first correct kernel unless ``explore_without_device=True``, and says so
before any call is made (:meth:`LMAuthor.device_notice`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import dspy

from mk.author.proposal import Proposal
from mk.errors import AgentOutputError, BudgetExceeded, ConfigError, KnowledgeError, MkError
from mk.harness.suite import DEFAULT_DISTRIBUTIONS, DEFAULT_SEEDS, Case
from mk.harness.results import reason_of
from mk.scopes import agent_scope, node_scope
from mk.profile import ProfileReport
from mk.contracts import Author, Context, Plan
from mk.programs.validation import positional_count
from mk.task import Scale, Task

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_TEMPERATURE = 1.0  # for rollouts when neither the author nor the LM sets a temperature above 0

#: what a kernel must be, by the target's kernel language (``mk.targets.Target.kernel_language``; "" for a target
#: judged as plain JAX), so a registered target in an existing language gets its language's rules
_LANGUAGE_RULES = {
    "mosaic": ("Write a Pallas TPU kernel (jax.experimental.pallas.pallas_call; jax.experimental.pallas.tpu for memory "
            "spaces): the judge requires a pallas_call on this target. The last two dims of every block must be "
            "divisible by 8 and 128 or equal the full array dims; pad or mask shapes that do not divide. Without a TPU "
            "the kernel is lowered for TPU and run in interpret mode, so correctness is checked but time is not."),
    "triton": ("Write a Pallas Triton kernel (jax.experimental.pallas.pallas_call with "
            "compiler_params=jax.experimental.pallas.triton.CompilerParams(num_warps=..., num_stages=...)): the judge "
            "requires a pallas_call on this target. Block dims must be powers of two; mask the ragged edges."),
    "": ("Pallas does not compile for this target: write a pure-JAX rewrite (jax.numpy / jax.lax) that XLA compiles into "
            "fewer or cheaper passes over memory than the reference."),
}


#: kernel skeletons in the hardware brief: each lowers for its target and passes mk's judge on a bf16 matmul
#: (tests/test_lm_feedback.py judges them), so a model can start from code that is known to work
TPU_SKELETON = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _block(dim, want, align):
    """The largest multiple of `align` <= `want` that divides `dim`; the full dim when none does."""
    b = min(want, dim) // align * align
    while b >= align:
        if dim % b == 0:
            return b
        b -= align
    return dim


def _matmul_body(x_ref, y_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def kernel(x, y, *, block_m=256, block_n=256, block_k=512):
    m, kdim = x.shape  # shapes are read here, at trace time: one kernel serves every suite shape
    n = y.shape[1]
    bm, bn, bk = _block(m, block_m, 16), _block(n, block_n, 128), _block(kdim, block_k, 128)
    return pl.pallas_call(
        _matmul_body,
        grid=(m // bm, n // bn, kdim // bk),  # the reduction axis last
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],  # f32 accumulator, kept across the k steps
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


CONFIG_SPACE = {"block_m": [128, 256], "block_n": [128, 256], "block_k": [256, 512]}
'''.strip()

GPU_SKELETON = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _block(dim, want):
    """The largest power of two <= `want` that divides `dim` (Triton blocks are powers of two)."""
    b = 1
    while b * 2 <= min(want, dim) and dim % (b * 2) == 0:
        b *= 2
    return b


def _matmul_body(x_ref, y_ref, o_ref, *, block_k, steps):
    def step(k, acc):  # the f32 accumulator lives in registers, carried through the K loop
        x = x_ref[:, pl.ds(k * block_k, block_k)]
        y = y_ref[pl.ds(k * block_k, block_k), :]
        return acc + jnp.dot(x, y, preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, steps, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def kernel(x, y, *, block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=2):
    m, kdim = x.shape  # shapes are read here, at trace time
    n = y.shape[1]
    bm, bn, bk = _block(m, block_m), _block(n, block_n), _block(kdim, block_k)
    body = lambda x_ref, y_ref, o_ref: _matmul_body(x_ref, y_ref, o_ref, block_k=bk, steps=kdim // bk)
    return pl.pallas_call(
        body,
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, kdim), lambda i, j: (i, 0)),
                  pl.BlockSpec((kdim, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(x, y)


CONFIG_SPACE = {"block_m": [32, 64], "block_n": [32, 64], "block_k": [32], "num_warps": [4], "num_stages": [2]}
'''.strip()

#: by kernel language, as :data:`_LANGUAGE_RULES`
SKELETONS = {"mosaic": TPU_SKELETON, "triton": GPU_SKELETON}
#: how much of one kernel's code a prompt shows (the best and the latest failing one each)
KERNEL_CHARS = 8000
#: the fixer's view of an error: its tail (where Python and JAX put the cause and the shapes)
ERROR_CHARS = 8000


class Retriever(Protocol):
    def retrieve(self, query: str, k: int = 5, target: str | None = None) -> str: ...


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
    lines.extend(_chip_rules(spec))
    if spec.notes:
        lines.append(spec.notes)
    language = get_target(target).kernel_language
    lines.append(_LANGUAGE_RULES[language] if language in _LANGUAGE_RULES else
                 f"Write a Pallas kernel in the {language} kernel language: the judge requires a pallas_call on this target.")
    if language in SKELETONS:
        lines.append(f"A {target.upper()} kernel skeleton that lowers and passes the judge (a tiled matmul; adapt it, keep "
                     f"its shape handling):\n```python\n{SKELETONS[language]}\n```")
    return "\n".join(x for x in lines if x)


def chip_facts(name: str) -> dict[str, Any]:
    """The raw ``data/hardware.json`` entry of a chip (fields the typed spec does not carry, e.g. the scoped VMEM)."""
    from importlib import resources

    try:
        raw = json.loads(resources.files("mk.data").joinpath("hardware.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        log.debug("no hardware table: %s", exc)
        return {}
    return next((s for s in raw.get("specs", []) if s.get("name") == name), {})


def _chip_rules(spec: Any) -> list[str]:
    """Per-generation kernel rules from the chip's facts: scoped VMEM, dtype packing, megacore."""
    facts = chip_facts(spec.name)
    out = []
    scoped = facts.get("scoped_vmem_default_bytes")
    if scoped:
        of = f" of the {spec.vmem_bytes / 2**20:.4g} MiB physical" if spec.vmem_bytes else ""
        out.append(f"scoped VMEM: a kernel gets {scoped / 2**20:.4g} MiB by default{of}; budget 2 buffers x every "
                   "block + scratch under it, or raise it with pltpu.CompilerParams(vmem_limit_bytes=...) "
                   "(stay well under the physical VMEM)")
    tiles = facts.get("vreg_tiles")
    if tiles:
        shown = ", ".join(f"{dt} {tuple(t)}" for dt, t in tiles.items())
        large = facts.get("large_second_minor_tiling_default")
        out.append(f"dtype packing: one vreg holds {shown}; make the second-minor block dim a multiple of 16 for "
                   "16-bit and 32 for 8-bit types (8 for 32-bit), the minor one a multiple of 128"
                   + ("; XLA tiles 16-bit arrays (16, 128) on this chip by default" if large else ""))
    if spec.kind == "tpu" and (spec.cores or 1) > 1 and spec.jax_devices_per_chip == 1:
        out.append(f"megacore: the {spec.cores} TensorCores run as one device; mark independent grid axes 'parallel' in "
                   "dimension_semantics so they split across the cores, the reduction axis 'arbitrary' (and last)")
    elif spec.kind == "tpu":
        out.append("dimension_semantics: mark independent grid axes 'parallel', the reduction axis 'arbitrary' (and last)")
    return out


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


# --- what earlier iterations tell the next call -----------------------------------------
_SLUG_SKIP = frozenset("the a an and or of to in on for with by into per as at is it its that this then one each so be "
                       "use using from than over which we our all while only".split())


def plan_digest(plan: Any) -> str:
    """A short hash of what a plan says (approach, strategy, tiling, memory, pipelining; not its speedup guess)."""
    norm = lambda t: " ".join(str(t or "").lower().split())  # noqa: E731
    key = json.dumps({"approach": plan.approach, "strategy": norm(plan.strategy), "tiling": dict(sorted(plan.tiling.items())),
                      "memory": norm(plan.memory_placement), "pipelining": norm(plan.pipelining)}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:6]


def plan_name(plan: Any) -> str:
    """A plan's name from its content: the approach, a few words of the strategy, and :func:`plan_digest`
    (``pallas-fuse-mean-squares-scale-3f2a1c``): equal plans get equal names, different plans different ones."""
    words = [w for w in re.findall(r"[a-z][a-z0-9]*", plan.strategy.lower()) if w not in _SLUG_SKIP][:4]
    slug = "-".join([plan.approach, *words])[:40].rstrip("-")
    return f"{slug}-{plan_digest(plan)}"


def _clip(text: str, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _tail(text: str, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


def _ends(text: str, limit: int, head: int = 1500) -> str:
    """``text`` within ``limit`` characters keeping both ends: the verdict's reason comes first, the innermost
    frames of the traceback last."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[:head] + "\n...\n" + text[-(limit - head - 5):]


def _best(history: list[Any]) -> Any:
    correct = [s for s in history if s.correct]
    measured = [s for s in correct if s.speedup is not None]
    return max(measured, key=lambda s: s.speedup) if measured else (correct[0] if correct else None)


def history_text(history: list[Any]) -> str:
    """One line per earlier iteration, for the planner: the plan by its content name and text, the verdict, the
    reason, the speedup. The analyst's reading is not repeated here (the latest is in ``feedback``)."""
    lines = []
    for s in history:
        parts = [f"iteration {s.iteration} ({s.proposal}): {s.status}"]
        if s.failed_phase:
            parts.append(f"failed in {s.failed_phase}")
        if s.reason:
            parts.append(_clip(s.reason, 600))
        if s.speedup is not None:
            parts.append(f"speedup {s.speedup:.2f}x")
        elif s.correct:
            parts.append("speed not measured")
        if s.config:
            parts.append(f"config {s.config}")
        line = "; ".join(parts)
        if s.rationale:
            line += f"\n    plan: {_clip(s.rationale, 500)}"
        lines.append(line)
    return "\n".join(lines)


def kernels_text(history: list[Any], *, limit: int = KERNEL_CHARS, reasons: bool = True) -> str:
    """The best kernel so far (code, speedup, config), the latest one when it is neither the best nor failing (a
    correct attempt that is not the best: otherwise a later prompt shows only the seed and never the model's own
    kernel) and the latest failing one (code, verdict, reason), as text; empty when no kernel was judged yet.
    ``reasons=False`` leaves the verdict's reason out (the planner reads it in the history already)."""
    best = _best(history)
    failing = next((s for s in reversed(history) if not s.correct and s.source.strip()), None)
    latest = next((s for s in reversed(history) if s.source.strip()), None)
    parts = []
    if best is not None:
        parts.append(f"best kernel so far: iteration {best.iteration} ({best.proposal}): {_speed(best)}\n"
                     f"```python\n{_clip(best.source, limit)}\n```")
    if latest is not None and latest is not best and latest is not failing:
        parts.append(f"your latest kernel: iteration {latest.iteration} ({latest.proposal}): {_speed(latest)}\n"
                     f"```python\n{_clip(latest.source, limit)}\n```")
    if failing is not None:
        where = f" in the {failing.failed_phase} phase" if failing.failed_phase else ""
        why = f"reason: {_clip(failing.reason, 1500)}" if reasons else "reason: in the history"
        parts.append(f"latest failing kernel: iteration {failing.iteration} ({failing.proposal}): verdict {failing.status}{where}; "
                     f"{why}\n```python\n{_clip(failing.source, limit)}\n```")
    return "\n\n".join(parts)


def _speed(snap: Any) -> str:
    """A correct snapshot's speed in words: measured, else the compiler's estimate labelled as one, else none."""
    config = f", config {snap.config}" if snap.config else ""
    if snap.speedup is not None:
        return f"speedup {snap.speedup:.2f}x{config}"
    est = getattr(snap, "estimate", None)
    if est is not None:
        where = f"{est.chip} at {est.scale}" + ("" if est.judged else " (compiled there, not judged there)")
        return f"estimated {est.estimated_speedup:.2f}x over XLA on {where} (an estimate, not a measurement){config}"
    return f"correct, speed not measured here{config}"


_LINE_REF = re.compile(r"\bline (\d+)\b")


def error_text(error: str, source: str, *, limit: int = ERROR_CHARS, context: int = 2) -> str:
    """The judge's error for the fixer: its tail (``limit`` characters) and the candidate's own lines it points
    at (``line N`` in the verdict: the static check's finding or the candidate's frame of the traceback)."""
    text = _ends(error, limit)
    code = source.splitlines()
    refs = []
    for m in _LINE_REF.finditer(error):
        n = int(m.group(1))
        if 1 <= n <= len(code) and n not in refs:
            refs.append(n)
    blocks = []
    for n in refs[:3]:
        lo, hi = max(1, n - context), min(len(code), n + context)
        blocks.append("\n".join(f"{'>' if i == n else ' '} {i:4d} | {code[i - 1]}" for i in range(lo, hi + 1)))
    if blocks:
        text += "\n\nthe candidate's lines it points at:\n" + "\n...\n".join(blocks)
    return text


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
class LMAuthor(Author):
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
    (an Auto loop that learned nothing new) is asked with the plans it already
    gave listed, so the prompt itself changes; an implementer call on a plan
    implemented before (here, by an ancestor, or by a sibling named in a
    search hint) gets a rollout of its own.

    ``explore_without_device``: without a device of the target nothing is
    timed, so after the first correct kernel further LM calls cannot change the
    result; by default the author then stops (and says so up front, before any
    call: :meth:`device_notice`). ``True`` keeps exploring. ``replans``: how
    many times a plan that repeats one already tried is asked again before the
    author stops with "no new plan".
    """

    def __init__(self, lm: Any, *, knowledge: Retriever | None = None, k: int = 5, seeds: bool = True,
                 synthesize_tests: bool = True, attempts: int = 3, model: str | None = None,
                 rollout: int | None = None, temperature: float | None = None, explore_without_device: bool = False,
                 replans: int = 2, agent_lms: Mapping[str, Any] | None = None):
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
        self.explore_without_device = explore_without_device
        self.replans = replans
        #: a model per sub-agent (``compile_fixer``, ``planner`` ...) where it is not ``lm`` (a cheaper fixer)
        self.agent_lms = dict(agent_lms or {})
        self._sticky_stop = False  # a stop for good (analyst, planner failure, no device), not "no new plan this time"
        self._proposed: dict[str, list[Any]] = {}  # digest of the planner's inputs -> plans given for them
        self._implemented: dict[str, int] = {}  # plan name -> times implemented by this author
        self._fixes: dict[tuple[int, str], list[dict[str, str]]] = {}  # (iteration, proposal) -> fix attempts
        self._announced: set[str] = set()

    # --- run plumbing ----------------------------------------------------------------
    def fork(self, *, rollout: int | None = None) -> "LMAuthor":
        """A fresh author for another trajectory (a search node): same LM, accounting and knowledge, new state;
        ``rollout`` makes its LM calls an independent sample (see the class docstring)."""
        return LMAuthor(self.lm, knowledge=self.knowledge, k=self.k, seeds=self.seeds, synthesize_tests=self.synthesize_tests,
                        attempts=self.attempts, model=self.model, rollout=rollout, temperature=self.temperature,
                        explore_without_device=self.explore_without_device, replans=self.replans, agent_lms=self.agent_lms)

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
        from mk.scopes import current_agent

        lm = self.agent_lms.get(current_agent() or "", self.lm)  # the sub-agent in scope may have its own model
        if self.rollout is None and repeat == 0:
            return lm
        k = 0 if self.rollout is None else self.rollout
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"rollout must be an int >= 0 or None, got {self.rollout!r}", hint="use the sample's index")
        if not callable(getattr(lm, "copy", None)):
            log.warning("%s has no copy(); its calls cannot draw independent samples", type(lm).__name__)
            return lm
        rollout_id = (k + repeat) * (k + repeat + 1) // 2 + repeat  # Cantor pairing: one id per (rollout, repeat)
        return lm.copy(rollout_id=rollout_id, temperature=self.sample_temperature)

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
        self._announce(target)  # before the first call is spent
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
        self._announce(ctx.target)
        if self.stop_reason and self._sticky_stop:
            return None
        self.stop_reason = ""
        if self._no_device_stop(ctx):
            return None
        if self.seeds and self._seed_queue is None:
            self._seed_queue = self._offline_seeds(ctx)
        if self._seed_queue:
            seed = self._seed_queue.pop(0)
            return Plan(seed.name, seed.rationale, seed)
        brief = self._brief(ctx.task, ctx.target)
        feedback = self.feedback_text(ctx)
        history = history_text(ctx.history)
        kernels = kernels_text(ctx.history, reasons=False)
        hardware = hardware_brief(ctx.target)
        passages = with_lessons(ctx, self._retrieve(f"{ctx.task.name} {ctx.target} pallas kernel\n{brief[:400]}\n{feedback[-300:]}",
                                                    ctx.target), "Plans that worked in earlier runs on similar tasks")
        digest = hashlib.sha256("\0".join([str(self.rollout), brief, ctx.target, passages, feedback, history, kernels]).encode()).hexdigest()
        given = self._proposed.setdefault(digest, [])  # plans this author already gave for these very inputs
        tried = {s.proposal: s for s in ctx.history}
        for _ in range(self.replans + 1):
            note = self._repeat_note(given)
            asked = feedback + ("\n\n" + note if note and feedback else note)
            key = hashlib.sha256((digest + asked).encode()).hexdigest()
            repeat = self._plan_inputs.get(key, 0)  # the very same prompt again: only a rollout draws a new answer
            self._plan_inputs[key] = repeat + 1
            try:
                with node_scope(self._node(ctx)), agent_scope(self.planner.agent), dspy.context(lm=self.draw_lm(repeat)):
                    plan = self.planner(task_analysis=brief, hardware=hardware, passages=passages, feedback=asked,
                                        history=history, kernels=kernels).plan
            except AgentOutputError as exc:
                self._stop(f"the planner gave no valid plan: {exc}")
                return None
            self._lm_plans += 1
            name = plan_name(plan)
            if name not in tried and name not in {plan_name(p) for p in given}:
                given.append(plan)
                return Plan(name, _plan_text(plan), plan)
            log.info("the planner repeated plan %s (%s); asking again", name,
                     f"tried in iteration {tried[name].iteration}" if name in tried else "already proposed")
            given.append(plan)
        self._stop(f"the planner proposed no new plan in {self.replans + 1} tries (each repeated one already tried)",
                   sticky=False)
        return None

    def implement(self, ctx: Context, plan: Plan) -> Proposal:
        if isinstance(plan.data, Proposal):
            return plan.data
        typed = plan.data
        if typed is None:  # a plan written by hand (HITL): let the planner's schema carry its text
            from mk.signatures import Plan as TypedPlan

            from mk.targets import get_target

            typed = TypedPlan(approach="pallas" if get_target(ctx.target).needs_kernel else "jax", strategy=plan.text,
                              expected_speedup=1.0)
        passages = self._retrieve(f"{typed.approach} {typed.strategy} {typed.memory_placement} {typed.pipelining}", ctx.target)
        repeat = self._implement_repeat(ctx, plan)
        self._implemented[plan.name] = self._implemented.get(plan.name, 0) + 1
        with node_scope(self._node(ctx)), agent_scope(self.implementer.agent), dspy.context(lm=self.draw_lm(repeat)):
            impl = self.implementer(task_analysis=self._brief(ctx.task, ctx.target), plan=typed,
                                    hardware=hardware_brief(ctx.target), passages=passages, task=ctx.task,
                                    kernels=kernels_text(ctx.history)).implementation
        return Proposal(plan.name, impl.code, plan.text, "lm")

    def fix(self, ctx: Context, proposal: Proposal, error: str) -> Proposal | None:
        from mk.programs.test_synthesizer import input_spec

        attempts = self._fixes.setdefault((getattr(ctx, "iteration", 0), proposal.name), [])
        query = reason_of(error)  # the verdict's reason: the message, not the traceback's file lines
        passages = with_lessons(ctx, self._retrieve(query[-1500:], ctx.target), "Fixes that resolved similar errors in earlier runs")
        plan = getattr(ctx, "plan", None)
        try:
            with node_scope(self._node(ctx)), agent_scope(self.fixer.agent), dspy.context(lm=self.draw_lm()):
                out = self.fixer(error=error_text(error, proposal.source), code=proposal.source, passages=passages,
                                 task=ctx.task, shapes=input_spec(ctx.task), hardware=hardware_brief(ctx.target),
                                 plan=plan.text if plan is not None else proposal.rationale,
                                 earlier_fixes=_fixes_text(attempts, error), tried=[a["code"] for a in attempts])
        except AgentOutputError as exc:
            log.warning("no fix for %s: %s", proposal.name, exc)
            return None
        attempts.append({"error": error, "explanation": out.explanation, "code": out.implementation.code})
        rationale = proposal.rationale.split(" (fixed: ")[0]
        return Proposal(proposal.name, out.implementation.code, f"{rationale} (fixed: {out.explanation})", proposal.template)

    def analyse(self, ctx: Context, report: ProfileReport) -> str:
        if not report.measured:  # nothing was timed: the analyst would read no numbers, so it is not asked
            return (f"time not measured ({report.reason or 'not timed'}); {report.bound or 'unknown'}-bound by the task "
                    "analysis; the profile analyst was not asked")
        history = history_text(ctx.history)
        try:
            with node_scope(self._node(ctx)), agent_scope(self.analyst.agent), dspy.context(lm=self.draw_lm()):
                a = self.analyst(profile=report.summary(), task_analysis=self._brief(ctx.task, ctx.target),
                                 hardware=hardware_brief(ctx.target), history=history).analysis
        except AgentOutputError as exc:
            log.warning("no profile analysis: %s", exc)
            return f"profile analysis unavailable; {report.bound or 'unknown'}-bound"
        text = f"{a.bottleneck}-bound: {a.evidence}"
        if a.decision == "stop":
            self._stop(f"the profile analyst decided to stop ({a.evidence})")
            return text + "; analyst: stop"
        return text + f"; next: {a.next_step} (expected {a.expected_gain:.2g}x)"

    # --- what the sub-agents see -------------------------------------------------------------
    @staticmethod
    def feedback_text(ctx: Context) -> str:
        """The planner's ``feedback``: what the history does not already say. Auto's summary lines of snapshots in
        ``ctx.history`` are dropped (the history lists them); a search's notes stay; the previous round's measured
        profile and the analyst's reading are added."""
        text = ctx.feedback or ""
        for snap in ctx.history:
            text = text.replace(snap.summary(), "")
        kept = [ln for ln in text.splitlines() if ln.strip()]
        last = ctx.history[-1] if ctx.history else None
        if last is not None and last.profile is not None and last.profile.measured:
            kept.append(f"profile of iteration {last.iteration} ({last.proposal}):\n{last.profile.summary()}")
        if last is not None and last.feedback:
            kept.append(f"reading of iteration {last.iteration}: {last.feedback}")
        return "\n".join(kept)

    def kernels_text(self, ctx: Context) -> str:
        return kernels_text(ctx.history)

    # --- the no-device policy -------------------------------------------------------------------
    def device_notice(self, target: str) -> str | None:
        """What this author will do without a device of ``target`` (None when one is here): said before spending."""
        if self._can_time(target):
            return None
        if self.explore_without_device:
            return (f"no {target} device here: kernels are compile-checked and tested in interpret mode but not timed; "
                    "exploring after the first correct kernel anyway (--explore), though further LM calls "
                    "cannot change which kernel is kept")
        return (f"no {target} device here: kernels are compile-checked and tested in interpret mode but not timed, so "
                "the run stops after the first correct kernel (more LM calls could not change the result); "
                "pass --explore (explore=True in Python) to keep exploring")

    @staticmethod
    def _can_time(target: str) -> bool:
        from mk.targets import get_target

        try:
            return get_target(target).can_time()
        except MkError as exc:
            log.debug("cannot tell whether %s can be timed: %s", target, exc)
            return False

    def announced(self, target: str) -> None:
        """The notice for ``target`` was already said (the CLI prints it before the run): do not log it again."""
        self._announced.add(target)

    def _announce(self, target: str) -> None:
        if target in self._announced:
            return
        self._announced.add(target)
        note = self.device_notice(target)
        if note:
            log.warning(note)

    def _no_device_stop(self, ctx: Context) -> bool:
        if self.explore_without_device or not any(s.correct for s in ctx.history) or self._can_time(ctx.target):
            return False
        first = next(s for s in ctx.history if s.correct)
        self._stop(f"no {ctx.target} device here to time kernels: stopped after the first correct kernel "
                   f"(iteration {first.iteration}, {first.proposal}); pass --explore (explore=True in Python) to keep exploring")
        return True

    def _stop(self, reason: str, *, sticky: bool = True) -> None:
        self.stop_reason, self._sticky_stop = reason, sticky
        log.warning(reason) if sticky else log.info(reason)

    @staticmethod
    def _repeat_note(given: list[Any]) -> str:
        if not given:
            return ""
        lines = "\n".join(f"- {plan_name(p)}: {_clip(p.strategy, 300)}" for p in given)
        return ("Plans you already proposed for this same situation (each was already tried here or not taken); "
                f"propose a different strategy:\n{lines}")

    def _implement_repeat(self, ctx: Context, plan: Plan) -> int:
        """How often ``plan`` was implemented before: by this author, in this history, or by another search node
        (its name or text in the feedback); > 0 draws a fresh sample instead of DSPy's cached answer."""
        n = self._implemented.get(plan.name, 0)
        feedback = ctx.feedback or ""
        seen_here = sum(1 for s in ctx.history if s.proposal == plan.name)
        seen_there = feedback.count(plan.name) + (feedback.count(plan.text) if plan.text else 0)
        return max(n, seen_here + seen_there)

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

    def _retrieve(self, query: str, target: str | None = None) -> str:
        """Passages for ``query``; ``target`` puts the other platforms' passages last (a TPU fixer is not offered
        Triton errors). A retriever without a ``target`` parameter is asked without it."""
        if self.knowledge is None:
            return ""
        try:
            params = inspect.signature(self.knowledge.retrieve).parameters
            if "target" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                return self.knowledge.retrieve(query, self.k, target=target)
            return self.knowledge.retrieve(query, self.k)
        except (KnowledgeError, OSError, ValueError) as exc:
            log.warning("knowledge retrieval failed (the author goes on without passages): %s", exc)
            return ""


def with_lessons(ctx: Any, passages: str, heading: str) -> str:
    """``passages`` with the lessons Auto found for this call (mk.lessons) in front of them, under ``heading``."""
    lessons = getattr(ctx, "lessons", "") or ""
    if not lessons:
        return passages
    return f"{heading} (mk's own lessons, with where each came from):\n{lessons}" + (f"\n\n{passages}" if passages else "")


def _fixes_text(attempts: list[dict[str, str]], error: str) -> str:
    """Earlier fix attempts for one candidate and how each ended (the next attempt's error, or ``error`` now)."""
    lines = []
    for i, a in enumerate(attempts):
        after = attempts[i + 1]["error"] if i + 1 < len(attempts) else error
        same = " (the same error as before it)" if after.strip() == a["error"].strip() else ""
        lines.append(f"fix attempt {i + 1}: for the error {_clip(reason_of(a['error']), 400)!r} you changed: "
                     f"{_clip(a['explanation'], 400)}\n  it failed{same}: {_clip(reason_of(after), 600)}")
    if lines:
        lines.append("Each of these failed: do not repeat a failed fix; try a different change.")
    return "\n".join(lines)




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
