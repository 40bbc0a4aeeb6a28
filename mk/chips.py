"""Chips: the accelerators mk compiles for without the device.

A chip is a row of ``data/hardware.json`` with a ``compile`` entry: for a TPU the
libtpu topology it names (``jax.experimental.topologies``), for a GPU the figures
mk writes into XLA's ``GpuTargetConfig`` text proto. The real compilers then run
here, on the CPU: libtpu (Mosaic and XLA:TPU) and XLA's CUDA pipeline (Triton,
LLVM, ``ptxas``). Nothing in this module imports JAX at import time; the device
objects are made only in the judge's compile worker (:mod:`mk.harness.compiler`).

Which compilers are installed is one question, :func:`compiler_missing`; the
answer goes into every verdict ("compiled for v6e" or "lowered only: libtpu is
not installed"), never a silent downgrade.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mk import hardware
from mk.errors import TargetError
from mk.hardware import HardwareSpec

log = logging.getLogger(__name__)

#: how a user gets the real compilers (the README says the same)
INSTALL_HINT = 'pip install "mk[aot]"  (libtpu for TPU chips; jax-cuda12-plugin and nvidia-cuda-nvcc-cu12 for GPUs)'


@dataclass(frozen=True)
class Chip:
    """One chip mk compiles for: its hardware row and how to compile for it."""

    spec: HardwareSpec

    @property
    def name(self) -> str:
        return str(self.spec.name)

    @property
    def kind(self) -> str:
        """``tpu`` or ``gpu``: the target whose programs compile for this chip."""
        return str(self.spec.kind)

    @property
    def scoped_vmem_limit(self) -> int | None:
        """TPU: the VMEM one kernel may use unless it raises ``vmem_limit_bytes``."""
        return self.spec.scoped_vmem_default_bytes if self.kind == "tpu" else None

    @property
    def shared_memory_limit(self) -> int | None:
        """GPU: the most shared memory one block may opt in to."""
        return int(self.spec.compile["shared_memory_per_block_optin_bytes"]) if self.kind == "gpu" else None

    @property
    def sm_arch(self) -> str:
        """GPU: ``ptxas``'s ``-arch`` for this chip (``sm_90a`` on Hopper: XLA compiles for the accelerated features)."""
        major, minor = self.spec.compile["compute_capability"]
        return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"

    def limits(self) -> dict[str, int]:
        """The limits the compiler enforces, as data for a verdict."""
        if self.kind == "tpu":
            return {"scoped_vmem_bytes": int(self.scoped_vmem_limit or 0), "vmem_bytes": int(self.spec.vmem_bytes or 0)}
        c = self.spec.compile
        return {"shared_memory_per_block_bytes": int(c["shared_memory_per_block_optin_bytes"]),
                "registers_per_thread": 255, "threads_per_block": int(c["threads_per_block"])}


def get_chip(name: str | Chip) -> Chip:
    """A chip by name or alias (``v6e``, ``tpu7x``, ``h100``, ``NVIDIA H200``); a TargetError naming the known ones
    for a chip mk cannot compile for."""
    if isinstance(name, Chip):
        return name
    try:
        spec = hardware.get_spec(str(name))
    except TargetError:
        raise TargetError(f"unknown chip {name!r}", hint=f"use one of: {', '.join(chip_names())}") from None
    if not spec.compile:
        raise TargetError(f"mk cannot compile for {spec.full_name} without it", hint=f"use one of: {', '.join(chip_names())}")
    return Chip(spec)


def chip_names(kind: str | None = None) -> tuple[str, ...]:
    """The chips mk compiles for (of one kind, ``tpu`` or ``gpu``, when given)."""
    return tuple(s.name for s in hardware.load_specs().values() if s.compile and (kind is None or s.kind == kind))


def chips_for_target(target: Any) -> tuple[str, ...]:
    """The chips a target's programs compile for (its kernel language's kind)."""
    from mk.targets import get_target

    tgt = get_target(target)
    return chip_names(tgt.chip_kind) if tgt.chip_kind else ()


def chip_for(target: Any, chip: str | None = None) -> Chip | None:
    """The chip a target's programs are compiled for: ``chip`` when given (it must be of the target's kind), else the
    target's default; None for a target that compiles for no chip (``cpu``)."""
    from mk.targets import get_target

    tgt = get_target(target)
    if not tgt.chip_kind:
        if chip:
            raise TargetError(f"target {tgt.name!r} compiles for no chip, so --chip {chip} does not apply",
                              hint="pass --chip with --target tpu or --target gpu")
        return None
    found = get_chip(chip or tgt.default_chip)
    if found.kind != tgt.chip_kind:
        raise TargetError(f"chip {found.name!r} is a {found.kind.upper()}, not a chip for target {tgt.name!r}",
                          hint=f"use one of: {', '.join(chip_names(tgt.chip_kind))}")
    return found


# --- the compilers ---------------------------------------------------------------------
def cuda_dir() -> Path | None:
    """The folder of PyPI's ``nvidia-cuda-nvcc-cu12`` (``bin/ptxas``, ``nvvm/libdevice``), where installed."""
    try:
        found = importlib.util.find_spec("nvidia.cuda_nvcc")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    root = Path(next(iter(found.submodule_search_locations)))
    return root if (root / "bin" / "ptxas").exists() else None


def compiler_missing(kind: str) -> str | None:
    """Why this machine cannot compile for chips of ``kind`` (a sentence naming the missing package), or None."""
    if kind == "tpu":
        if _absent("libtpu"):
            return "libtpu is not installed"
        return None
    if kind == "gpu":
        if _absent("jax_plugins.xla_cuda12") and _absent("jax_cuda12_plugin"):
            return "jax-cuda12-plugin is not installed"
        if cuda_dir() is None:
            return "ptxas is not installed (nvidia-cuda-nvcc-cu12)"
        return None
    return f"mk compiles for no {kind!r} chip"


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def gpu_target_config(chip: Chip) -> str:
    """XLA's ``GpuTargetConfig`` in text form, written from the chip's row of ``data/hardware.json``."""
    s, c = chip.spec, chip.spec.compile
    major, minor = c["compute_capability"]
    info = {
        "threads_per_block_limit": c["threads_per_block"], "threads_per_warp": 32,
        "shared_memory_per_block": c["shared_memory_per_block_bytes"], "shared_memory_per_core": s.shared_mem_per_sm_bytes,
        "threads_per_core_limit": c["threads_per_sm"], "core_count": s.cores, "fpus_per_core": c["fpus_per_sm"],
        "block_dim_limit_x": 2147483647, "block_dim_limit_y": 65535, "block_dim_limit_z": 65535,
        "memory_bandwidth": int(s.hbm_bandwidth), "l2_cache_size": s.l2_bytes, "clock_rate_ghz": c["clock_ghz"],
        "device_memory_size": s.hbm_bytes, "shared_memory_per_block_optin": c["shared_memory_per_block_optin_bytes"],
        "registers_per_core_limit": c["registers_per_sm"], "registers_per_block_limit": c["registers_per_block"],
    }
    lines = ["gpu_device_info {"]
    lines += [f"  {k}: {v}" for k, v in info.items()]
    lines += [f"  cuda_compute_capability {{ major: {major} minor: {minor} }}", "}", 'platform_name: "CUDA"',
              "dnn_version_info { major: 9 minor: 1 }", f'device_description_str: "{c["device_kind"]}"']
    return "\n".join(lines) + "\n"


def compile_device(chip: Chip) -> Any:
    """A compile-only JAX device for ``chip`` (libtpu's topology, or XLA's CUDA compiler for a target config).
    Only the judge's compile worker calls this: it loads the compilers."""
    from jax.experimental import topologies

    if chip.kind == "tpu":
        c = chip.spec.compile
        topo = topologies.get_topology_desc(topology_name=c["topology"], platform="tpu", chip_config_name=c["chip_config"],
                                            chips_per_host_bounds=_host_bounds(c["topology"]), num_slices=1)
    else:
        topo = topologies.get_topology_desc(platform="cuda", target_config=gpu_target_config(chip), topology="1x1x1")
    return topo.devices[0]


def _host_bounds(topology: str) -> tuple[int, int, int]:
    dims = [int(x) for x in topology.split(":", 1)[1].split("x")]
    dims = (dims + [1, 1, 1])[:3]
    return (min(dims[0], 2), min(dims[1], 2), 1)
