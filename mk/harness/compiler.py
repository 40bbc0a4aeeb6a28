"""The compile worker: the chip's real compiler on exported device programs (trusted side).

Started as ``python -I -B -m mk.harness.compiler WORKDIR`` with ``MK_CHIP_KIND``
(``tpu`` or ``gpu``). Like the runner it never imports candidate code: it
deserializes a ``jax.export`` artifact the judge already checked, and compiles
it for a compile-only device of the chip (``mk.chips.compile_device``): libtpu's
Mosaic and XLA:TPU, or XLA's CUDA pipeline with its Triton and ``ptxas``. It
answers with the compiler's own error, or with the figures the compiler gives:

- TPU: each ``tpu_custom_call``'s ``used_scoped_memory_configs`` (the kernel's
  scoped VMEM), the program's generated code and temporary bytes;
- GPU: each kernel's grid, threads and shared memory from XLA's thunk dump, and
  registers, spill stores/loads and stack from ``ptxas -v`` on the dumped PTX.

It runs in its own process so that a compile that runs for minutes (ptxas on a
kernel that spills) is killed at the judge's deadline, and because libtpu takes a
machine-wide lock (``ALLOW_MULTIPLE_LIBTPU_LOAD`` lets workers of several judges
compile at once).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_state: dict[str, Any] = {"devices": {}}

#: ``ptxas -v`` on one dumped PTX file is given at most this long
PTXAS_S = 120.0
#: libtpu's flag that dumps its static schedule (set only in an estimate worker: :func:`environment`)
_ESTIMATE_FLAG = "--xla_jf_dump_static_llo_profile_to"


def environment(kind: str, workdir: Path, estimate: bool = False) -> dict[str, str]:
    """The worker's environment for chips of ``kind`` (JAX pinned to the CPU: no device is ever opened).
    ``estimate`` (TPU): libtpu also writes its static schedule of every kernel and fusion it compiles (an internal
    flag). Only an estimate worker sets it, never the judge's: with it some compiles reserve more memory than a
    worker's cap and libtpu aborts (seen on 33k's conv and 9p's SwiGLU at full: ``mmap error: 12``)."""
    from mk import chips

    env = {"JAX_PLATFORMS": "cpu", "MK_CHIP_KIND": kind}
    if kind == "tpu":
        env.update(TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_WORKER_HOSTNAMES="localhost",
                   TPU_ACCELERATOR_TYPE="v6e-1")
        if estimate:
            env["LIBTPU_INIT_ARGS"] = f"{_ESTIMATE_FLAG}={workdir / 'llo'}"
    else:
        cuda = chips.cuda_dir()
        flags = [f"--xla_dump_to={workdir / 'dump'}"] + ([f"--xla_gpu_cuda_data_dir={cuda}"] if cuda else [])
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def versions(kind: str) -> str:
    """The versions of the compilers for chips of ``kind`` (part of every result and of the judge's cache key)."""
    from importlib import metadata

    names = ("jaxlib", "libtpu") if kind == "tpu" else ("jaxlib", "jax-cuda12-plugin", "nvidia-cuda-nvcc-cu12")
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def compile_program(request: dict[str, Any]) -> dict[str, Any]:
    """Compile the exported program ``request["program"]`` (a path in the work dir) for ``request["chip"]``."""
    import jax
    from jax import export
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from mk import chips

    chip = chips.get_chip(request["chip"])
    missing = chips.compiler_missing(chip.kind)
    if missing:
        return {"ok": False, "missing": missing}
    device = _state["devices"].get(chip.name)
    if device is None:
        device = _state["devices"][chip.name] = chips.compile_device(chip)
    workdir: Path = _state["workdir"]
    exported = export.deserialize(bytearray((workdir / request["program"]).read_bytes()))
    sharding = NamedSharding(Mesh([device], ("x",)), PartitionSpec())
    args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in exported.in_avals]
    dump, llo = workdir / "dump", workdir / "llo"
    shutil.rmtree(dump, ignore_errors=True)
    shutil.rmtree(llo, ignore_errors=True)
    t0 = time.perf_counter()
    try:
        compiled = jax.jit(exported.call).lower(*args).compile()
    except Exception as exc:  # noqa: BLE001 - the compiler's refusal is the answer
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:20000], "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    memory = compiled.memory_analysis()
    reply: dict[str, Any] = {"ok": True, "seconds": seconds,
                             "code_bytes": int(getattr(memory, "generated_code_size_in_bytes", 0) or 0) or None,
                             "temp_bytes": int(getattr(memory, "temp_size_in_bytes", 0) or 0)}
    if chip.kind == "tpu":
        cycles = static_cycles(llo)
        text = compiled.as_text()
        reply["kernels"] = [{**k, "estimated_cycles": cycles.pop(k["instruction"], None)} for k in tpu_kernels(text)]
        reply["loops"] = len(_WHILE.findall(text))
        if _ESTIMATE_FLAG in os.environ.get("LIBTPU_INIT_ARGS", ""):  # an estimate worker: the kernels' blocks
            from mk.harness.mosaic_traffic import program_traffic

            found = program_traffic(exported.mlir_module())
            unknown = list(found.unknown)
            if len(reply["kernels"]) != found.kernels:  # e.g. one jitted kernel function called twice: written once
                unknown.append(f"the compiled program runs {len(reply['kernels'])} kernels where the exported one "
                               f"shows {found.kernels}")
            reply["kernel_bytes"], reply["traffic_unknown"] = found.moved_bytes, unknown
        if cycles:  # what the schedule shows outside the Pallas kernels: XLA's own fusions and copies
            reply["xla_estimated_cycles"] = sum(cycles.values())
        reply["flops"], reply["bytes_accessed"] = _cost(compiled)
        reply["io_bytes"] = sum(math.prod(a.shape) * a.dtype.itemsize for a in (*exported.in_avals, *exported.out_avals))
    else:
        reply["kernels"] = gpu_kernels(dump, chip.sm_arch, compiled.as_text())
    shutil.rmtree(dump, ignore_errors=True)
    shutil.rmtree(llo, ignore_errors=True)
    return reply


_LLO_OP = re.compile(r'hlo_op_name:\s*"([^"]+)"\s*estimated_cycles:\s*(\d+)')


def static_cycles(llo: Path) -> dict[str, int]:
    """libtpu's static schedule estimate (``--xla_jf_dump_static_llo_profile_to``): cycles per compiled kernel or
    XLA fusion, by HLO instruction name (a Pallas kernel's is its ``tpu_custom_call``'s). An estimate of the chip's
    schedule, not a measurement: it does not model HBM stalls."""
    cycles: dict[str, int] = {}
    for path in sorted(llo.glob("*static_llo_profile.textproto")) if llo.is_dir() else []:
        for name, n in _LLO_OP.findall(path.read_text(errors="replace")):
            cycles[name] = cycles.get(name, 0) + int(n)
    return cycles


def _cost(compiled: Any) -> tuple[float | None, float | None]:
    """XLA's cost analysis of the program: its flops and the bytes it reads and writes, outside its Pallas kernels
    (XLA counts nothing for a custom call); None where XLA gives none."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - a figure, not the verdict
        return None, None
    cost = cost[0] if isinstance(cost, list) and cost else cost
    cost = cost if isinstance(cost, dict) else {}

    def figure(name: str) -> float | None:
        value = cost.get(name)
        return float(value) if value is not None and value >= 0 else None

    return figure("flops"), figure("bytes accessed")


_WHILE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=.*?\swhile\(", re.MULTILINE)
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*custom_call_target=\"tpu_custom_call\"")
_SCOPED = re.compile(r'\\?"used_scoped_memory_configs\\?":\s*\[([^\]]*)\]')
_SIZE = re.compile(r'\\?"size\\?":\s*\\?"?(\d+)')


def tpu_kernels(hlo_text: str) -> list[dict[str, Any]]:
    """Each Mosaic kernel of a compiled TPU program: its instruction name and scoped VMEM bytes."""
    kernels = []
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        scoped = _SCOPED.search(line)
        size = sum(int(x) for x in _SIZE.findall(scoped.group(1))) if scoped else 0
        kernels.append({"name": re.sub(r"\.\d+$", "", m.group(1)), "instruction": m.group(1), "kind": "pallas",
                        "scoped_vmem_bytes": size})
    return kernels


_THUNK = re.compile(r"(\d+):\s+(kCustomKernel|kKernel)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+grid:\s*\[([^\]]*)\]\s+"
                    r"threads:\s*\[([^\]]*)\]\s+shared_memory:\s*(\d+)")
_THUNK_ID = re.compile(r'profile_annotation:\s*"([^"]+)"\s*thunk_id:\s*(\d+)')
_CUSTOM_CALL = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*\scustom-call\(.*custom_call_target="([^"]+)"', re.MULTILINE)
_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def gpu_kernels(dump: Path, arch: str, hlo_text: str) -> list[dict[str, Any]]:
    """Each kernel of a compiled GPU program: grid, threads and shared memory (XLA's thunk sequence), registers and
    spills (``ptxas -v`` on the dumped PTX, the same ptxas XLA ran). A kernel is ``pallas`` when the HLO instruction
    XLA launched it for (the thunk's profile annotation) is a kernel custom call in ``hlo_text``, the compiled
    program; every other kernel is ``xla``. Never by the kernel's name: a candidate names its own kernel, and one
    named like XLA's fusions (``wrapped_*``, ``*_fusion``) would hide its spills from the flag and ``--no-spills``."""
    from mk.targets import get_target

    calls = get_target("gpu").kernel_calls
    pallas = {name for name, target in _CUSTOM_CALL.findall(hlo_text) if target in calls}
    instruction: dict[int, str] = {}
    for path in sorted(dump.glob("*thunk_metadata.txt")):
        instruction.update((int(i), name) for name, i in _THUNK_ID.findall(path.read_text(errors="replace")))
    kernels: list[dict[str, Any]] = []
    for path in sorted(dump.glob("*thunk_sequence.txt")):
        for m in _THUNK.finditer(path.read_text(errors="replace")):
            kind = "pallas" if instruction.get(int(m.group(1))) in pallas else "xla"
            kernels.append({"name": m.group(3), "kind": kind, "grid": _ints(m.group(4)),
                            "threads": _ints(m.group(5)), "shared_memory_bytes": int(m.group(6))})
    figures = _ptxas(dump, arch)
    for k in kernels:
        k.update(figures.get(k["name"], {}))
    return kernels


def _ptxas(dump: Path, arch: str) -> dict[str, dict[str, int]]:
    from mk import chips

    cuda = chips.cuda_dir()
    if cuda is None:
        return {}
    found: dict[str, dict[str, int]] = {}
    for ptx in sorted(dump.glob("*.ptx")):
        if ptx.stat().st_size == 0:
            continue
        try:
            out = subprocess.run([str(cuda / "bin" / "ptxas"), f"-arch={arch}", "-v", str(ptx), "-o", os.devnull],
                                 capture_output=True, text=True, timeout=PTXAS_S).stderr
        except (OSError, subprocess.TimeoutExpired):
            continue
        entry = None
        for line in out.splitlines():
            if (m := _PTXAS_ENTRY.search(line)):
                entry = found.setdefault(m.group(1), {})  # one name in two PTX files: the larger figures of both
                continue
            figures: dict[str, int] = {}
            if entry is not None and (m := _PTXAS_FRAME.search(line)):
                figures = dict(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                               spill_load_bytes=int(m.group(3)))
            elif entry is not None and (m := _PTXAS_REGS.search(line)):
                figures = {"registers": int(m.group(1))}
            for key, value in figures.items():
                entry[key] = max(entry.get(key, 0), value)
    return found


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _load_mosaic_gpu_runtime() -> None:
    """Load Mosaic GPU's host runtime. A deserialized ``mosaic_gpu_v2`` call (a GPU ``pallas_call`` without Triton
    compiler params, JAX's default lowering) is JIT-linked against its symbols when XLA compiles it: without them
    the compile fails with "Failed to lookup host symbol" for a kernel the device runs."""
    try:
        import jax.experimental.mosaic.gpu  # noqa: F401
    except ImportError as exc:  # the Triton path still compiles; a Mosaic GPU program then fails with the reason
        log.warning("Mosaic GPU's runtime is not available to the compile worker: %s", exc)


def main(argv: list[str] | None = None) -> int:
    from mk.harness.process import serve

    args = sys.argv[1:] if argv is None else argv
    _state["workdir"] = Path(args[0] if args else os.getcwd()).resolve()
    import jax  # noqa: F401  (imported before the first request: a warm worker)

    if os.environ.get("MK_CHIP_KIND") == "gpu":
        _load_mosaic_gpu_runtime()

    serve({"compile": compile_program, "versions": lambda _r: {"ok": True, "versions": versions(os.environ.get("MK_CHIP_KIND", "tpu"))}})
    os._exit(0)


if __name__ == "__main__":
    main()
