"""The compile stage: the chip's real compiler on the device program the judge checked.

After the program checks, the judge (never the tracer) hands each scale's
exported target program, byte for byte the one whose kernels and custom calls
it read, to the compile worker (:mod:`mk.harness.compiler`) for the evaluation's
chip: at every judged scale and at each of the task's declared scales that the
cases do not run (``full`` under ``--scale ci``: compiling it costs seconds where
interpreting it costs hours). Rules:

- a scale whose cases run and that the chip's compiler refuses is
  ``compile_error`` with the compiler's own message (which buffer, how many
  bytes, which limit), the chip and the scale;
- a declared scale compiled only, that the compiler refuses, is not claimed:
  it is recorded (``EvalResult.compiled``), flagged, and it stays outside the
  kernel's envelope;
- register spills on a GPU are a flag, and ``compile_error`` where the user asks
  (``no_spills``);
- a compile past its deadline is ``timeout`` naming the compile phase;
- without the compilers, nothing silently degrades: ``compile_check`` says
  ``lowered only: <which package is missing>``.

Results are cached in the judge's process by (program digest, chip, compiler
versions): the compiler is deterministic, and autotuning or a search re-judges
the same program often.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
from typing import Any

from mk.chips import INSTALL_HINT, Chip, compiler_missing
from mk.harness import compile_cache
from mk.harness.heldout import FRESH
from mk.harness.process import ChildFailed
from mk.harness.results import CompileResult, KernelFigures

log = logging.getLogger(__name__)

#: seconds one chip compile may take (a conv kernel's H100 compile was seen running past 5 minutes)
COMPILE_S = 300.0
_cache: dict[tuple[str, str, bool, bool], tuple[CompileResult, str]] = {}
_cache_lock = threading.Lock()
_versions: dict[str, str] = {}


class CompileRefused(Exception):
    """The chip's compiler refused a judged scale (or its deadline passed): the judge's verdict, from the stage."""

    def __init__(self, status: str, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


def lowered_only(chip: Chip) -> str | None:
    """``lowered only: ...`` when this machine cannot compile for ``chip`` (what every verdict then says), else None."""
    missing = compiler_missing(chip.kind)
    return f"lowered only: {missing}, so nothing was compiled for {chip.name} (to compile for it: {INSTALL_HINT})" \
        if missing else None


def compile_function(fn: Any, *structs: Any, chip: str, scale: str = "program", estimate: bool = False) -> CompileResult:
    """``jax.jit(fn)`` at ``structs`` exported for ``chip``'s platform as the judge's tracer exports a target program
    (lowered assuming the chip) and compiled by the compile worker, every refusal a result: for mk's own kernels
    and evals (this process runs ``fn``: never a candidate's code)."""
    import jax
    from jax import export

    from mk.chips import get_chip
    from mk.harness.process import default_memory_limit_mb
    from mk.targets import get_target

    spec = get_chip(chip)
    tgt = get_target(spec.kind)
    checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(tgt.kernel_calls)]
    with tgt.lowering_context(spec.name):
        blob = export.export(jax.jit(fn), platforms=[tgt.platform], disabled_checks=checks)(*structs).serialize()
    results, flags = compile_scales(spec, {scale: blob}, set(), memory_mb=default_memory_limit_mb(), strict=False,
                                    estimate=estimate)
    if not results:
        raise CompileRefused("timeout", (flags or ["the compile did not finish"])[-1])
    return results[0]


def compile_scales(chip: Chip, programs: dict[str, bytes], judged: set[str], *, memory_mb: int,
                   deadline_s: float = COMPILE_S, no_spills: bool = False, strict: bool = True,
                   unflagged: frozenset[str] | set[str] = frozenset(), estimate: bool = False
                   ) -> tuple[list[CompileResult], list[str]]:
    """Compile each scale's exported device program for ``chip``: the results and the flags they raise. Raises
    :class:`CompileRefused` for a judged scale the compiler refuses or a compile past ``deadline_s`` (elsewhere
    each is a flag: a declared scale the cases do not run, a fresh size the judge drew); with
    ``strict=False`` (a chip compiled for information, beside the verdict's own) every refusal is a flag.
    ``unflagged``: scales whose refusal the caller reports itself (a held-out or fresh size the judge leaves out:
    ``evaluate._narrow``), so it raises no flag here."""
    from mk.harness import pool

    results: list[CompileResult] = []
    flags: list[str] = []
    for scale, blob in programs.items():
        key = (hashlib.sha256(blob).hexdigest(), chip.name, no_spills, estimate)
        with _cache_lock:
            cached, full_error = _cache.get(key, (None, ""))
        disk_key = _disk_key(chip, key) if cached is None else ""
        if cached is None:  # compiled before, by this or another process (mk/harness/compile_cache.py)
            cached, full_error = _stored(disk_key)
            if cached is not None and cached.seconds > deadline_s:  # it took longer than this caller allows
                cached, full_error = None, ""
        if cached is None:
            worker = pool.compiler(chip.kind, memory_mb, estimate)
            version = _versions.get(chip.kind)
            if version is None:
                version = _versions[chip.kind] = str(worker.ask({"op": "versions"}, 60.0, "reading the compilers' versions")
                                                     .get("versions", ""))
            name = f"program-{secrets.token_hex(6)}.export"
            (worker.workdir / name).write_bytes(blob)
            try:
                reply = worker.ask({"op": "compile", "program": name, "chip": chip.name}, deadline_s,
                                   f"the {chip.name} compile (chip compile phase) at scale {scale}")
            except ChildFailed as exc:
                pool.discard(worker)
                if not strict or scale not in judged:
                    if scale in unflagged:
                        continue
                    flags.append(f"the {chip.name} compile at scale {scale} did not finish "
                                 f"({_unclaimed(scale, scale in judged)}): {exc.message}")
                    continue
                if exc.outcome == "timeout":
                    raise CompileRefused("timeout", f"compiling for {chip.name} at scale {scale} ran past its "
                                                    f"{deadline_s:.0f} s limit (the chip compile phase)") from None
                raise CompileRefused("crashed", f"the {chip.name} compiler crashed at scale {scale}: {exc.message}") from None
            finally:
                (worker.workdir / name).unlink(missing_ok=True)
            if reply.get("missing"):
                raise RuntimeError(f"the compile worker found no compiler: {reply['missing']}")
            cached, full_error = _result(chip, scale, reply, version), str(reply.get("error", ""))[:8000]
            if compile_cache.keepable("ok" in reply, full_error):
                compile_cache.store(disk_key, cached.model_dump(), full_error)
        with _cache_lock:
            _cache[key] = (cached, full_error)
        result = cached.model_copy(update={"scale": scale, "judged": scale in judged})
        results.append(result)
        if not result.ok:
            if result.judged and strict:
                raise CompileRefused("compile_error", f"the {chip.spec.full_name} compiler refuses the kernel at scale "
                                                      f"{scale}: {result.error}", error=full_error)
            if scale in unflagged:
                continue
            flags.append(f"does not compile for {chip.name} at scale {scale} ({_unclaimed(scale, result.judged)}): "
                         f"{result.error}")
            continue
        spilled = [k for k in result.kernels if k.kind == "pallas" and (k.spill_store_bytes or k.spill_load_bytes)]
        if spilled:
            k = spilled[0]
            what = (f"kernel {k.name} spills registers on {chip.name} at scale {scale} ({k.spill_store_bytes or 0} B of "
                    f"spill stores, {k.spill_load_bytes or 0} B of loads per thread, {k.registers} registers)")
            if no_spills and result.judged and strict:
                raise CompileRefused("compile_error", f"{what}; --no-spills refuses it: use smaller blocks or fewer warps")
            flags.append(what)
    return results, flags


def _disk_key(chip: Chip, key: tuple[str, str, bool, bool]) -> str:
    from importlib import metadata

    from mk.harness.compiler import versions

    version = _versions.get(f"local:{chip.kind}")
    if version is None:
        version = _versions[f"local:{chip.kind}"] = f"{versions(chip.kind)}, jax {metadata.version('jax')}"
    sha, _, no_spills, estimate = key
    # the chip's whole spec: its limits and its compile entry are read from it
    return compile_cache.key(sha, chip.name, chip.spec.model_dump(), no_spills, estimate, version)


def _stored(disk_key: str) -> tuple[CompileResult | None, str]:
    """A result the disk cache holds under ``disk_key`` (:func:`_disk_key`; its scale set by the caller)."""
    found = compile_cache.load(disk_key)
    if found is None:
        return None, ""
    try:
        return CompileResult(**found[0]), found[1]
    except (TypeError, ValueError):  # fields of another version: compile again
        return None, ""


def _unclaimed(scale: str, judged: bool) -> str:
    """Why a refusal at ``scale`` is a flag, not the verdict."""
    if judged:
        return "a chip compiled beside the verdict's own"
    if scale.startswith(FRESH):
        return "a size the judge drew to test generality, not one the task declares: not claimed for this chip"
    return "a declared scale the cases do not run, so it is not claimed"


def _result(chip: Chip, scale: str, reply: dict[str, Any], version: str) -> CompileResult:
    kernels = [KernelFigures(**{k: v for k, v in item.items() if k in KernelFigures.model_fields})
               for item in reply.get("kernels") or [] if isinstance(item, dict)]
    return CompileResult(chip=chip.name, scale=scale, ok=bool(reply.get("ok")), seconds=float(reply.get("seconds") or 0.0),
                         error="" if reply.get("ok") else summarize_error(str(reply.get("error", "unknown error"))),
                         kernels=kernels, code_bytes=reply.get("code_bytes"), temp_bytes=reply.get("temp_bytes"),
                         limits=chip.limits(), compiler=version, xla_estimated_cycles=reply.get("xla_estimated_cycles"),
                         bytes_accessed=reply.get("bytes_accessed"), io_bytes=reply.get("io_bytes"),
                         kernel_bytes=reply.get("kernel_bytes"), traffic_unknown=list(reply.get("traffic_unknown") or []),
                         loops=reply.get("loops"), flops=reply.get("flops"))


#: the lines of a compiler error that say which limit, which buffer and how many bytes
_TELLING = re.compile(r"(Scoped allocation with size[^\n]*|Used [\d.]+[KMG] of [\d.]+[KMG] vmem[^\n]*|"
                      r"Shared memory size limit exceeded[^\n]*|Insufficient registers[^\n]*|"
                      r"register spilling[^\n]*|Mosaic failed to compile[^\n]*|Maximum allowed number of elements[^\n]*?than that|exceeds? [^\n]*limit[^\n]*)", re.IGNORECASE)


def summarize_error(text: str, limit: int = 500) -> str:
    """The compiler's refusal in one line: its status and the lines that name the limit, the buffer and the bytes."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    head = lines[0] if lines else text.strip()
    head = re.sub(r"^\w*Error:\s*", "", head)
    telling = []
    for m in _TELLING.finditer(text):
        piece = m.group(1).strip()
        if piece not in head and piece not in telling:
            telling.append(piece)
    largest = re.search(r"Largest program allocations in vmem:\s*1\.\s*Size:\s*([\d.]+[KMG])\s*Operator:\s*([^\n]*)", text)
    if largest:
        telling.append(f"largest buffer {largest.group(1)} ({largest.group(2).strip()[:120]})")
    line = "; ".join([head[:300], *telling])
    return line if len(line) <= limit else line[: limit - 3] + "..."

