"""The frozen test suite and the judge's own reference outputs.

A :class:`FrozenSuite` is an immutable list of :class:`Case` values covering
every scale the task defines, several seeds and several input distributions.
It is hashed (task fingerprint + cases) and the hash is stored with every
verdict, so nothing downstream can quietly edit the tests (rule 14).

Reference outputs are computed here, in the judge, under ``jax.jit`` on the
CPU with matmul precision pinned to ``highest``, and cached on disk under
``$MK_HOME/cache/reference/<task fingerprint>/<case>`` together with a hash of
the inputs they were computed from (so a task whose generator is not
deterministic is recomputed rather than served stale outputs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from mk.errors import TaskError
from mk.harness.arrays import load_arrays, save_arrays
from mk.task import FLOAT_DISTRIBUTIONS, Scale, Task

log = logging.getLogger(__name__)

DEFAULT_SEEDS = (0, 1)
#: the cases of a held-out scale: the task's own inputs and one more seed of re-drawn ones
HELDOUT_CASES = (("native", 0), ("normal", 1))
DEFAULT_DISTRIBUTIONS = ("native", "normal", "uniform", "large_magnitude", "edges")
#: distributions drawn with the first seed only (one case per scale is enough to show an overflow or a padding row)
_ONE_SEED = ("native", "large_magnitude", "zeros", "ones", "edges")


@dataclass(frozen=True)
class Case:
    """One correctness case: inputs are ``task.make_inputs(scale, seed, distribution)``."""

    scale: str
    seed: int
    distribution: str
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.scale}-s{self.seed}-{self.distribution}"


@dataclass(frozen=True)
class FrozenSuite:
    """An immutable, hashed list of cases for one task."""

    task_name: str
    task_fingerprint: str
    cases: tuple[Case, ...]
    dropped: tuple[str, ...] = ()
    #: held-out scales (sizes and static values no author is shown); their cases are in ``cases``
    heldout: tuple[Scale, ...] = ()
    #: the task's own scales the held-out ones (and every evaluation's fresh size) grow from; not synthesised ones
    base_scales: tuple[str, ...] = ()
    hash: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.cases:
            raise TaskError(f"the suite for task {self.task_name!r} has no case", hint="check the task's scales and input generator")
        blob = json.dumps(
            {"task": self.task_fingerprint, "cases": [dataclasses.astuple(c) for c in self.cases],
             "heldout": [scale_record(s) for s in self.heldout], "base": list(self.base_scales)}, sort_keys=True, default=repr,
        )
        object.__setattr__(self, "hash", hashlib.sha256(blob.encode()).hexdigest())

    @property
    def heldout_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.heldout)

    def base(self, task: Task) -> Task:
        """``task`` with only the scales its held-out scales grow from (the fresh size grows from them too)."""
        names = [n for n in self.base_scales if n in task.scales]
        return task.with_scales({n: task.scales[n] for n in names}) if names and len(names) < len(task.scales) else task

    def judged(self, task: Task) -> Task:
        """``task`` with this suite's held-out scales added: the task every case of the suite runs on."""
        if not self.heldout or all(s.name in task.scales for s in self.heldout):
            return task
        return task.with_scales({**task.scales, **{s.name: s for s in self.heldout}})

    @property
    def scales(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.scale for c in self.cases))

    def for_scale(self, scale: str) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.scale == scale)

    def subset(self, n: int) -> "FrozenSuite":
        """The first ``n`` cases taken round-robin over scales (a fast subset for autotuning)."""
        if n >= len(self.cases):
            return self
        queues = [list(self.for_scale(s)) for s in self.scales]
        picked: list[Case] = []
        while len(picked) < max(n, 1):
            for q in queues:
                if q and len(picked) < max(n, 1):
                    picked.append(q.pop(0))
        return FrozenSuite(self.task_name, self.task_fingerprint, tuple(picked), self.dropped, self.heldout, self.base_scales)

    def inputs(self, task: Task, case: Case) -> list[np.ndarray]:
        task = self.judged(task)
        return [np.asarray(x) for x in task.make_inputs(case.scale, case.seed, case.distribution)]


def scale_record(scale: Scale) -> dict[str, Any]:
    """A scale as plain data (for the suite hash and the envelope)."""
    return {"name": scale.name, "dims": dict(scale.dims), "shapes": [list(s) for s in scale.shapes] if scale.shapes else None,
            "static": {k: repr(v) for k, v in scale.static.items()}}


#: a case at one scale holds about this many times the reference's own footprint (XLA's memory analysis of the
#: compiled reference: its arguments, outputs and temporaries): the inputs in numpy, the float64 reference the judge
#: compares against, the candidate's outputs in the runner
CASE_FOOTPRINT = 3


def reference_bytes(task: Task, scale: str) -> int | None:
    """The bytes the task's reference needs at ``scale`` on this CPU (arguments + outputs + temporaries, from XLA's
    memory analysis of the compiled reference: a compile, nothing runs); None when it cannot be compiled here."""
    import jax

    try:
        compiled = jax.jit(task.bind(task.reference, scale)).lower(*task.arg_structs(scale)).compile()
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)
    except Exception as exc:  # noqa: BLE001 - a reference that does not compile here fails in the suite, with its reason
        log.debug("no memory analysis of %s at %s: %s", task.name, scale, exc)
        return None


def runnable_scales(task: Task, memory_mb: int) -> tuple[Task, dict[str, str]]:
    """``task`` restricted to the scales whose cases fit ``memory_mb`` on this CPU (the others stay declared, so the
    judge compiles them for the chip only), and why each other one was left out. A TaskError when none fits."""
    skipped = {}
    for name in task.scales:
        need = reference_bytes(task, name)
        if need is not None and need * CASE_FOOTPRINT > memory_mb << 20:
            skipped[name] = (f"its cases need about {need * CASE_FOOTPRINT / 2**30:.1f} GiB on this CPU ({CASE_FOOTPRINT} x "
                             f"{need / 2**30:.1f} GiB, XLA's memory analysis of the compiled reference), over the judge's "
                             f"{memory_mb / 1024:.1f} GiB")
    if not skipped:
        return task, {}
    if len(skipped) == len(task.scales):
        name, why = next(iter(skipped.items()))
        raise TaskError(f"no scale of task {task.name!r} can run on this CPU: at {name} {why}",
                        hint="declare a smaller scale (e.g. ci) in the task, or judge it on a machine with more memory")
    return task.only_scales([n for n in task.scales if n not in skipped]), skipped


def build_suite(
    task: Task,
    *,
    scales: Sequence[str] | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    distributions: Sequence[str] = DEFAULT_DISTRIBUTIONS,
    extra_cases: Iterable[Case] = (),
    heldout: bool = True,
) -> FrozenSuite:
    """Freeze the cases for ``task``: every scale (or ``scales``) x seeds x distributions, plus ``extra_cases``,
    plus (``heldout``) the cases of the task's held-out scales (:mod:`mk.harness.heldout`), which only the judge sees.

    A case is dropped (with a logged note kept in ``suite.dropped``) when all
    its floating inputs are zeros, or when its distribution makes the
    reference non-finite where the native inputs give finite outputs
    (structured inputs that only make sense with the task's own values)."""
    fingerprint = task.fingerprint()
    scales = list(scales) if scales else list(task.scales)
    for s in scales:
        task.scale(s)  # raises TaskError naming the valid scales
    for d in distributions:
        if d not in FLOAT_DISTRIBUTIONS:
            raise TaskError(f"unknown input distribution {d!r}", hint=f"use one of: {', '.join(FLOAT_DISTRIBUTIONS)}")
    if not seeds:
        raise TaskError("build_suite needs at least one seed")
    seeds_for_native = seeds[:1] if task.native_inputs is not None and not task.seeded_generator else seeds
    candidates: list[Case] = []
    for scale in scales:
        for dist in distributions:
            for seed in (seeds_for_native if dist == "native" else seeds[:1] if dist in _ONE_SEED else seeds):
                candidates.append(Case(scale, int(seed), dist, note="" if dist != "native" or task.native_inputs is None
                                       or task.seeded_generator else "the task's generator takes no seed"))
    candidates.extend(extra_cases)
    held: tuple[Scale, ...] = ()
    if heldout:
        from mk.harness.heldout import heldout_scales

        base = task.with_scales({n: task.scales[n] for n in scales}) if set(scales) != set(task.scales) else task
        held = heldout_scales(base)  # from the asked-for scales only: a synthesised case is not a size to grow from
        task = task.with_scales({**task.scales, **{s.name: s for s in held}}) if held else task
        for s in held:
            candidates.extend(Case(s.name, seed, dist, note="held out") for dist, seed in HELDOUT_CASES)
            if task.seeded_generator:  # the task's own structure (page tables, group sizes) redrawn at that size too
                candidates.append(Case(s.name, 1, "native", note="held out"))
    refs = ReferenceCache(task)
    kept: list[Case] = []
    dropped: list[str] = []
    native_finite: dict[str, bool] = {}
    for case in sorted(candidates, key=lambda c: c.distribution != "native"):
        inputs = [np.asarray(x) for x in task.make_inputs(case.scale, case.seed, case.distribution)]
        why = _zero_inputs(inputs) if case.distribution != "zeros" else None  # zeros only when asked for, beside the rest
        if why is None:
            finite = all(np.all(np.isfinite(o)) for o in refs.outputs(case, inputs) if _is_inexact(o))
            if case.distribution == "native":
                native_finite[case.scale] = native_finite.get(case.scale, True) and finite
            elif not finite and native_finite.get(case.scale, False):
                why = f"the reference is non-finite on {case.distribution!r} inputs but finite on the task's own inputs"
        if why:
            note = f"dropped {case.key}: {why}"
            log.info(note)
            dropped.append(note)
        else:
            kept.append(case)
    order = {id(c): i for i, c in enumerate(candidates)}
    kept.sort(key=lambda c: order[id(c)])
    kept_scales = {c.scale for c in kept}
    return FrozenSuite(task.name, fingerprint, tuple(kept), tuple(dropped), tuple(s for s in held if s.name in kept_scales),
                       tuple(scales) if held else ())


class ReferenceCache:
    """Reference outputs for a task's cases, computed in the judge on the CPU and cached on disk."""

    def __init__(self, task: Task, root: Path | None = None):
        self.task = task
        self.root = (root or mk_home() / "cache" / "reference") / task.fingerprint()
        self._jitted: dict[str, Callable[..., Any]] = {}

    def outputs(self, case: Case, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Output leaves of ``task.reference`` on ``inputs`` (cached by case and input hash)."""
        digest = hash_arrays(inputs)
        folder = self.root / case.key
        stamp = folder / "inputs.sha256"
        if stamp.is_file() and stamp.read_text() == digest:
            try:
                return load_arrays(folder, "out")
            except (OSError, ValueError) as exc:
                log.warning("reference cache %s unreadable (%s); recomputing", folder, exc)
        outs = self.compute(case.scale, inputs)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("out_*.npy"):
                old.unlink()
            save_arrays(folder, "out", outs)
            stamp.write_text(digest)
        except OSError as exc:
            log.warning("cannot cache reference outputs in %s: %s", folder, exc)
        return outs

    def compute(self, scale: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import jax

        if scale not in self._jitted:
            self._jitted[scale] = jax.jit(self.task.bind(self.task.reference, scale))
        cpu = jax.devices("cpu")[0]
        try:
            with jax.default_device(cpu), jax.default_matmul_precision("highest"):
                out = self._jitted[scale](*[jax.device_put(x, cpu) for x in inputs])
                leaves = jax.tree_util.tree_leaves(jax.block_until_ready(out))
        except Exception as exc:  # the task's own code failed: a task problem, not a candidate's
            raise TaskError(
                f"the reference of task {self.task.name!r} failed at scale {scale!r}: {type(exc).__name__}: {exc}",
                path=self.task.source,
                hint="fix the task's reference or its input spec",
            ) from exc
        return [np.asarray(x) for x in leaves]

    def compute_f32(self, scale: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
        """The reference with its bfloat16/float16 inputs in float32 (None when it does not run that way)."""
        import jax

        up = [np.asarray(x, np.float32) if x.dtype.name in ("bfloat16", "float16") else x for x in inputs]
        try:
            with jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest"):
                out = jax.jit(self.task.bind(self.task.reference, scale))(*up)
                return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.block_until_ready(out))]
        except Exception as exc:  # noqa: BLE001 - the rule is optional; the tolerance still applies
            log.info("the reference of %s does not run in float32: %s", self.task.name, exc)
            return None

    def compute_f64(self, scale: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
        """The reference with its float32 inputs in float64, run with JAX's 64-bit mode on (None when it does not
        run that way): the yardstick of the float32 rule (:func:`mk.harness.compare.compare_fair_f64`)."""
        import jax

        up = [np.asarray(x, np.float64) if x.dtype == np.float32 else x for x in inputs]
        try:
            with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest"):
                out = jax.jit(self.task.bind(self.task.reference, scale))(*up)
                return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.block_until_ready(out))]
        except Exception as exc:  # noqa: BLE001 - the rule is optional; the tolerance still applies
            log.info("the reference of %s does not run in float64: %s", self.task.name, exc)
            return None

    def export(self, scale: str, platforms: Sequence[str] = ("cpu",)) -> bytes:
        """The reference at ``scale`` as a serialized ``jax.export`` artifact (no source inside) that runs on each of
        ``platforms`` (e.g. ``("cpu", "tpu")``, so the worker can time it on the target's device)."""
        import jax
        from jax import export

        structs = self.task.arg_structs(scale)
        fn = jax.jit(self.task.bind(self.task.reference, scale))
        wanted = list(dict.fromkeys(platforms))
        with jax.default_matmul_precision("highest"):
            try:
                exp = export.export(fn, platforms=wanted)(*structs)
            except Exception as exc:  # a reference that cannot lower for the device stays timeable on the CPU only
                if wanted == ["cpu"]:
                    raise
                log.warning("the reference of %s cannot be exported for %s (%s); exporting for cpu only", self.task.name, wanted, exc)
                exp = export.export(fn, platforms=["cpu"])(*structs)
        return bytes(exp.serialize())


def mk_home() -> Path:
    return Path(os.environ.get("MK_HOME") or Path.home() / ".mk")


def hash_arrays(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.name}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _is_inexact(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or "float" in a.dtype.name


def _zero_inputs(inputs: Sequence[np.ndarray]) -> str | None:
    floats = [x for x in inputs if _is_inexact(x) and x.size]
    if floats and all(not np.any(x.astype(np.float32) != 0) for x in floats):
        return "every floating input is all zeros (would let constant outputs pass)"
    return None
