"""The state of one evaluation and the steps the judge's forward and backward checks share.

:mod:`mk.harness.evaluate` runs the pipeline; :mod:`mk.harness.gradient` checks a written backward with the same
steps (a case's inputs written for a child, its outputs asked for and read back, the tracer's claims about a program,
the verdict raised). Both import them from here, so neither imports the other.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mk.candidate import Candidate
from mk.harness.arrays import load_arrays, save_arrays
from mk.harness.process import Child, Timeouts
from mk.harness.results import CaseResult
from mk.harness.suite import FrozenSuite, ReferenceCache
from mk.harness.timing import TimingOptions
from mk.targets import Target
from mk.task import Task


_OOM_MARKERS = ("MemoryError", "RESOURCE_EXHAUSTED", "Out of memory", "std::bad_alloc")


#: reject a candidate when more than this share of the reference's FLOPs runs outside its kernels; flag above FLAG
OUTSIDE_SHARE_REJECT = 0.5


OUTSIDE_SHARE_FLAG = 0.1


#: outside work below this many operations per output element is never rejected (an epilogue)
EPILOGUE_OPS_PER_OUTPUT = 2


#: errors that mean "this machine cannot lower or run it", not "the kernel is wrong"
_UNVERIFIABLE = ("mosaic_gpu", "Mosaic GPU", "jaxlib GPU", "libtpu", "Cannot lower pallas_call on platform",
                 "needs a GPU", "requires a GPU", "not implemented in interpret mode", "Unimplemented primitive in Pallas TPU interpret")


class _Verdict(Exception):
    """Raised inside the pipeline to end it with a verdict."""

    def __init__(self, status: str, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


@dataclass
class _Run:
    """Everything one evaluation holds while it runs."""

    task: Task
    target: Target
    suite: FrozenSuite
    cand: Candidate
    timeouts: Timeouts
    timed: str
    require_pallas: bool
    config: dict[str, Any]
    measure: bool
    timing_opts: TimingOptions
    memory_mb: int
    rdir: Path | None = None  # this evaluation's folder in the runner's work dir
    env: dict[str, str] = field(default_factory=dict)
    iso: Any = None
    refs: ReferenceCache | None = None
    tracer: Child | None = None
    runner: Child | None = None
    isolation: str = ""
    programs: dict[str, dict[str, Any]] = field(default_factory=dict)
    exported: dict[str, Any] = field(default_factory=dict)
    cases: list[CaseResult] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    verified_by: str = ""
    compile_detail: str = ""
    failed_case: str = ""
    #: the suite's scales and this evaluation's fresh size (a secret draw within the held-out scale's rule)
    scales: tuple[str, ...] = ()
    #: the task's declared scales the cases do not run: traced and compiled for the chip only
    compile_scales: tuple[str, ...] = ()
    #: whether compile-only sizes may be claimed (one case each): only for a verdict that is kept
    claim: bool = False
    #: the task the verdict's envelope describes (the suite's scales and held-out scales, before fresh sizes)
    judged_task: Any = None
    #: scales asked for that are too big to run on this CPU (compile-only, but a refusal there is the verdict)
    too_big: tuple[str, ...] = ()
    #: the compile-only scales the verdict claims (compiled, and the code a judged size ran: :func:`_covered`)
    covered: list[str] = field(default_factory=list)
    #: the suite's held-out scales (the frozen suite's; :func:`_narrow` may leave some out)
    heldout: tuple[str, ...] = ()
    #: whether the candidate declares its envelope (MK_ENVELOPE): then no judged size may be left out
    declares_envelope: bool = False
    #: held-out scales and fresh sizes the kernel cannot be built at (scale -> why): left out by :func:`_narrow`
    unbuilt: dict[str, str] = field(default_factory=dict)
    #: the chip the device program is compiled for (None: a target that compiles for no chip)
    chip: Any = None
    also_chips: tuple[Any, ...] = ()
    no_spills: bool = False
    compile_check: str = ""
    compiled: list[Any] = field(default_factory=list)
    #: without the device: the compiler's estimated speedup over XLA (:mod:`mk.harness.estimate`)
    estimate: Any = None
    #: each scale's exported target program, as the compile stage compiled it
    device_programs: dict[str, bytes] = field(default_factory=dict)

    @property
    def on_device(self) -> bool:
        return not self.target.host and self.target.device_present()


def _int(value: Any) -> int:
    """An integer from the tracer's reply (a claim: anything else counts as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else 0


def _rel(child: Child, path: Path) -> str:
    return str(path.relative_to(child.workdir))


def check_facts(run: _Run, scale: str, facts: dict[str, Any], part: str = "") -> None:
    """The tracer's claims about one traced program that reject it (the forward's; ``part`` names another, e.g. the
    backward, in the reason)."""
    if facts.get("platform_dependent"):
        raise _Verdict("rejected", f"platform-dependent code (lax.platform_dependent) at scale {scale}{part}: the program "
                                   "checked on this machine would not be the one the device runs")
    if facts.get("shared_output_blocks"):
        raise _Verdict("rejected", f"{facts['shared_output_blocks'][0]} at scale {scale}{part}: Triton runs grid points "
                                   "concurrently, so they race on it; reduce inside one program instead")
    if facts.get("candidate_interpret") and not run.target.host:
        raise _Verdict("rejected", f"the candidate sets interpret mode on its kernel ({facts['candidate_interpret'][0]}){part}: "
                                   f"on a {run.target.name} it would never run as a kernel; leave interpret to the judge")


def check_precision(run: _Run, scale: str, facts: dict[str, Any], target_program: Any, part: str = "") -> None:
    """Rules 11 and 18 on one exported program: DMA write races (TPU), and float32 dots below HIGHEST precision
    outside its kernels (the judge reads the program) or inside them (the tracer's claim) on a task whose
    reference runs at HIGHEST. ``part`` names the program in the reason when it is not the forward."""
    from mk.harness import program

    if facts.get("dma_races") and run.target.interpreter == "tpu":
        raise _Verdict("rejected", f"{facts['dma_races'][0]} at scale {scale}{part} (a write/write DMA race: wait for the "
                                   "first copy, or use separate buffers)")
    if not run.target.host and _pins_highest(run.task) and program.low_precision_xla_dots(target_program.mlir_module()):
        raise _Verdict("rejected", f"a float32 dot outside the kernels runs below HIGHEST precision at scale {scale}{part} "
                                   "(one bf16 pass on a TPU, TF32 on a GPU) on a task whose reference runs at HIGHEST")
    if facts.get("low_precision_dots") and _pins_highest(run.task):
        raise _Verdict("rejected", f"{facts['low_precision_dots'][0]}{part} on a float32 task whose reference runs at "
                                   "HIGHEST precision (one bf16 pass on a TPU): use precision=HIGHEST in the kernel")


#: the TPU-interpreter check's runs (mk.harness.tracer.CHECKS), all of them for every TPU kernel: as the cases;
#: twice with "parallel" axes shuffled, each with its own secret fill (mk.harness.poison; never the ordered run
#: again, even with no such axis)
CHECK_RUNS = ("ordered", "shuffled", "garbage")


def _shuffles(facts: dict[str, Any]) -> bool:
    return any(n >= 2 for sizes in facts.get("parallel_axes") or [] for n in sizes)


def check_note(facts: dict[str, Any], check: str) -> str:
    """What the name of a TPU-interpreter check run adds about how it differs from the cases' run of the same trace
    (``ordered`` runs as they do: NaN in unwritten memory, the grid in order)."""
    if check == "ordered":
        return ""
    parallel = ""
    if _shuffles(facts):
        parallel = ('; "parallel" grid axes visited out of order, as a chip with two TensorCores may: state carried '
                    'along such an axis is a race there, declare it "arbitrary"')
    return parallel + ("; memory not yet written holds values of a secret fill here (as stale memory on a chip), NaN "
                       "in the cases")


def case_limit(run: _Run, grid_steps: Any, slow: float = 1.0) -> float:
    """The deadline of one case: the configured one on a device; off it, ``slow`` (race detection) times it, scaled
    by the kernels' grid steps (interpreted steps are slow), at most 20x."""
    return float(run.timeouts.case_s) * (1 if run.on_device else slow * min(20.0, max(1.0, _int(grid_steps) / 256)))


def ask_outputs(run: _Run, who: Child, folder: Path, request: dict[str, Any], limit: float, what: str
                ) -> tuple[list[np.ndarray], float]:
    """Ask the runner (or the tracer's TPU interpreter) to run one case whose inputs are in ``folder``: its outputs
    and the seconds it reports; an error, a race, an interpreter limit or a swapped folder ends in the judge's verdict."""
    reply = who.ask(request, limit, what)
    if reply.get("rejected"):  # the tracer's tripwires: the candidate patched it after the trace
        raise _Verdict("rejected", f"{what}: {reply['rejected']}")
    if not reply.get("ok"):
        text = _last_line(str(reply.get("error", "")))
        if _oom(text):
            raise _Verdict("crashed", f"{what} ran out of memory: {text}")
        if any(m in text for m in _UNVERIFIABLE) or reply.get("error_type") == "NotImplementedError" \
                or _interpreter_limit(reply):
            raise _Verdict("unverifiable_here", f"{what}: the CPU interpreter cannot execute this kernel ({text}); "
                                                f"judge it on a {run.target.name} device")
        raise _Verdict("incorrect", f"{what} raised {text}")
    if reply.get("races"):
        raise _Verdict("rejected", f"{what}: the TPU interpreter's race detector found a data race (a DMA or a "
                                   "semaphore is not waited for before the buffer is used)")
    if reply.get("unwritten"):  # a flag: reading and discarding is honest (upstream megablox); depending is not,
        # and the fills and the double-buffered output slots (mk.harness.races) make such a kernel disagree with itself
        flag = (f"reads memory before anything wrote it ({_strip_run(str(reply['unwritten']))}): on a chip it holds "
                "stale data (output blocks are not loaded from HBM), so the result must not depend on it")
        if flag not in run.flags:
            run.flags.append(flag)
    if folder.is_symlink() or not folder.resolve().is_relative_to(who.workdir.resolve()):
        raise _Verdict("crashed", f"{what}: the case folder was replaced by a link (outputs are read only from the work dir)")
    try:
        got = load_arrays(folder, "out")
    except (OSError, ValueError) as exc:
        raise _Verdict("crashed", f"{what}: outputs unreadable ({exc})") from None
    shutil.rmtree(folder, ignore_errors=True)
    return got, float(reply.get("seconds") or 0.0)


def _strip_run(text: str) -> str:
    """A finding without the interpreter's buffer numbers (they differ between runs; one flag per finding)."""
    return re.sub(r" buffer \d+", "", text)


#: JAX's interpreters (TPU interpreter, Pallas state discharge): an AttributeError or NotImplementedError raised
#: in them means the construct is not supported there (e.g. a reshaped ref in the TPU interpreter)
_INTERPRETER_CODE = ("/jax/_src/pallas/mosaic/interpret/", "/jax/_src/pallas/primitives.py", "/jax/_src/state/discharge.py")


def _interpreter_limit(reply: Mapping[str, Any]) -> bool:
    error = str(reply.get("error", ""))
    text = f"{error}\n{reply.get('traceback_tail', '')}"
    return _last_line(error).startswith(("AttributeError", "NotImplementedError")) and any(p in text for p in _INTERPRETER_CODE)


def _write_inputs(run: _Run, name: str, inputs: list[np.ndarray], into: Path | None = None) -> Path:
    base = into if into is not None else run.rdir
    if base is None:
        raise RuntimeError("the evaluation's folder is not open yet (evaluate._start opens it)")
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()  # fails rather than follow a link someone else put there
    save_arrays(folder, "in", list(inputs))
    return folder


#: the largest exported program the judge reads (a program is code; big tables belong in inputs)
MAX_PROGRAM_BYTES = 64 << 20


def _read_regular(path: Path, limit: int = MAX_PROGRAM_BYTES) -> bytes:
    """Read a file the tracer wrote without following links or blocking on fifos."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Verdict("crashed", f"the tracer left {path.name} as something other than a regular file")
        if info.st_size > limit:
            raise _Verdict("rejected", f"the exported program {path.name} is too large ({info.st_size >> 20} MiB > "
                                       f"{limit >> 20} MiB): pass large tables as inputs, not as constants baked into the code")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _pins_highest(task: Task) -> bool:
    """Float32 tasks are judged at HIGHEST matmul precision (the judge pins it for the reference)."""
    return any(np.dtype(s.dtype) == np.float32 for s in task.arg_structs(task.default_scale))


#: a line that only points elsewhere ("See details at https://...", a bare link): JAX ends some errors with one
_POINTER = re.compile(r"^(?:(?:see|for)(?: more)?(?: details| information| info)?(?: at| in| on|, see)?:?\s*)?"
                      r"<?https?://\S+>?\W*$", re.IGNORECASE)


def _last_line(text: str) -> str:
    """The line of an error that says what went wrong: the last non-empty one (Python puts the cause last) that is not
    only a pointer to documentation (JAX's Pallas errors end with "See details at <url>")."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    meaningful = [ln for ln in lines if not _POINTER.match(ln)]
    return (meaningful or lines or [text.strip()])[-1]


def _one_line(text: str, limit: int = 600) -> str:
    """The reason is one line a person can act on."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = " ".join(lines) if len(lines) <= 3 else f"{lines[0]} ... {lines[-1]}"
    return first if len(first) <= limit else first[: limit // 2 - 3] + " ... " + first[-(limit // 2) + 2:]


def _oom(message: str) -> bool:
    return any(m in message for m in _OOM_MARKERS)
