"""Hardware specs as data, and the roofline arithmetic on them.

The figures live in ``data/hardware.json`` (shipped as ``mk.data``), one
entry per chip with its sources and a ``notes`` field for what is uncertain.
They are per chip (TPU) or per GPU and dense (no sparsity). A JAX device can
be a fraction of a chip (TPU7x shows each TensorCore as a device), so the
roofline functions use the *per-device* figures
(:meth:`HardwareSpec.device_peak_flops`, :meth:`HardwareSpec.device_bandwidth`).

Roofline: a computation of ``flops`` FLOPs that must move ``bytes`` bytes of
HBM traffic cannot take less than ``max(flops / peak, bytes / bandwidth)``.
That floor is a lower bound, so where a dtype has no published peak the
fastest rate JAX could legitimately run it at is used (float32 matmuls run as
bfloat16 passes on TPU and as TF32 on NVIDIA GPUs under DEFAULT precision;
see ``f32_matmul_default``).

The ``cpu`` entry is an order-of-magnitude placeholder (``approximate``):
:func:`roofline_seconds` and :func:`bound` accept it as an estimate, but
:func:`roofline_fraction`, which is a claim about measured performance,
refuses it unless the caller substitutes measured figures.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mk.errors import TargetError

log = logging.getLogger(__name__)

_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "half": "float16",
    "f32": "float32",
    "float": "float32",
    "fp32": "float32",
    "tf32": "tfloat32",
    "f64": "float64",
    "fp8": "float8",
    "s8": "int8",
    "i8": "int8",
    "uint8": "int8",
}


class Source(BaseModel):
    model_config = ConfigDict(frozen=True)
    title: str
    url: str


class HardwareSpec(BaseModel):
    """One accelerator's peak rates and memory sizes (per chip / per GPU)."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["tpu", "gpu", "cpu"]
    full_name: str
    aliases: tuple[str, ...] = ()
    device_kind_patterns: tuple[str, ...] = ()
    peak_flops: dict[str, float | None] = Field(description="FLOP/s per dtype, dense; null when unpublished")
    f32_matmul_default: str = "float32"
    hbm_bandwidth: float = Field(gt=0, description="bytes/s")
    hbm_bytes: int | None = None
    vmem_bytes: int | None = None
    scoped_vmem_default_bytes: int | None = Field(
        default=None, description="TPU: the VMEM one kernel may use unless it sets vmem_limit_bytes")
    smem_bytes: int | None = None
    cmem_bytes: int | None = None
    shared_mem_per_sm_bytes: int | None = None
    l2_bytes: int | None = None
    cores: int | None = None
    core_kind: str = ""
    mxu_size: int | None = None
    mxus_per_core: int | None = None
    jax_devices_per_chip: int = 1
    #: TPU: the cycle rate mk's speed estimate assumes for libtpu's static-schedule cycles (see data/hardware.json)
    static_schedule_hz: float | None = None
    #: how mk compiles for this chip without it (see :mod:`mk.chips`); empty where it cannot
    compile: dict[str, Any] = Field(default_factory=dict)
    approximate: bool = False
    notes: str = ""
    sources: tuple[Source, ...] = ()

    def peak(self, dtype: str = "bfloat16") -> float:
        """Per-chip peak FLOP/s for ``dtype``; falls back to a faster published rate when unpublished."""
        name = normalize_dtype(dtype)
        value = self.peak_flops.get(name)
        if value:
            return float(value)
        fallback = {"float32": self.f32_matmul_default, "float16": "bfloat16", "float8": "bfloat16", "int8": "bfloat16", "int4": "int8"}.get(name)
        if fallback and fallback != name:
            log.debug("%s: no %s peak, using %s (a lower bound on time)", self.name, name, fallback)
            return self.peak(fallback)
        known = ", ".join(k for k, v in self.peak_flops.items() if v)
        raise TargetError(f"{self.full_name} has no peak FLOP/s for {dtype!r}", hint=f"known: {known}")

    def device_peak_flops(self, dtype: str = "bfloat16") -> float:
        return self.peak(dtype) / self.jax_devices_per_chip

    def device_bandwidth(self) -> float:
        return self.hbm_bandwidth / self.jax_devices_per_chip

    def ridge_point(self, dtype: str = "bfloat16") -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        return self.peak(dtype) / self.hbm_bandwidth


def normalize_dtype(dtype: object) -> str:
    """Canonical dtype family name: bfloat16, float16, float32, tfloat32, float64, float8, int8, int4 ..."""
    text = str(getattr(dtype, "name", dtype)).lower().replace("dtype(", "").strip("')\" ")
    text = _DTYPE_ALIASES.get(text, text)
    if text.startswith("float8"):
        return "float8"
    if text in ("int4", "uint4"):
        return "int4"
    if text in ("int16", "int32", "int64", "uint16", "uint32", "uint64", "bool"):
        return "int32"
    return text


def _norm(name: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[-_]", " ", name.strip().lower()))


@functools.lru_cache(maxsize=1)
def load_specs() -> dict[str, HardwareSpec]:
    """Every spec in ``data/hardware.json``, by canonical name."""
    try:
        raw = json.loads(resources.files("mk.data").joinpath("hardware.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TargetError(f"cannot read mk's hardware table: {exc}", hint="reinstall mk; data/hardware.json ships with it") from exc
    specs = [HardwareSpec.model_validate(entry) for entry in raw["specs"]]
    return {s.name: s for s in specs}


def get_spec(name: str | HardwareSpec) -> HardwareSpec:
    """A spec by name, alias ("v6e", "Trillium", "TPU v6 lite", "NVIDIA H200") or JAX device kind."""
    if isinstance(name, HardwareSpec):
        return name
    specs = load_specs()
    key = _norm(name)
    for spec in specs.values():
        if key == _norm(spec.name) or key in {_norm(a) for a in spec.aliases}:
            return spec
    found = spec_for_device_kind(name)
    if found is not None:
        return found
    raise TargetError(f"unknown hardware {name!r}", hint=f"known: {', '.join(specs)}")


def spec_for_device_kind(kind: str) -> HardwareSpec | None:
    """The spec whose patterns fully match a JAX ``device.device_kind``; None when unknown."""
    text = kind.strip()
    for spec in load_specs().values():
        for pattern in spec.device_kind_patterns:
            if re.fullmatch(pattern, text, flags=re.IGNORECASE):
                return spec
    return None


def default_spec(target: str) -> HardwareSpec:
    """The spec assumed for a target when the device is not present: the target's own ``spec`` (``mk.targets``;
    tpu->v6e, gpu->h200, cpu->cpu)."""
    from mk.targets import get_target

    name = get_target(target).spec
    if not name:
        raise TargetError(f"no default hardware for target {target!r}", hint="register the target with a `spec`")
    return get_spec(name)


def _check(flops: float, nbytes: float) -> None:
    if flops < 0 or nbytes < 0:
        raise TargetError(f"roofline needs non-negative work, got {flops=} {nbytes=}")


def compute_seconds(flops: float, spec: HardwareSpec | str, dtype: str = "bfloat16") -> float:
    spec = get_spec(spec)
    return float(flops) / spec.device_peak_flops(dtype)


def memory_seconds(nbytes: float, spec: HardwareSpec | str) -> float:
    spec = get_spec(spec)
    return float(nbytes) / spec.device_bandwidth()


def roofline_seconds(flops: float, bytes: float, spec: HardwareSpec | str, dtype: str = "bfloat16") -> float:  # noqa: A002
    """The least time one device can take: ``max(flops / peak, bytes / bandwidth)``."""
    _check(flops, bytes)
    return max(compute_seconds(flops, spec, dtype), memory_seconds(bytes, spec))


def roofline_fraction(measured_seconds: float, flops: float, bytes: float, spec: HardwareSpec | str, dtype: str = "bfloat16") -> float:  # noqa: A002
    """Fraction of the roofline achieved: floor / measured (1.0 = at the roofline)."""
    spec = get_spec(spec)
    if spec.approximate:
        raise TargetError(
            f"{spec.full_name} figures are placeholders; a roofline fraction against them means nothing",
            hint="measure this machine's peak FLOP/s and bandwidth and pass "
            "spec.model_copy(update={'peak_flops': ..., 'hbm_bandwidth': ..., 'approximate': False})",
        )
    if not measured_seconds or measured_seconds <= 0:
        raise TargetError(f"a roofline fraction needs a positive measured time, got {measured_seconds!r}")
    return roofline_seconds(flops, bytes, spec, dtype) / float(measured_seconds)


def bound(flops: float, bytes: float, spec: HardwareSpec | str, dtype: str = "bfloat16") -> Literal["compute", "memory"]:  # noqa: A002
    """Which side of the ridge point the work is on."""
    _check(flops, bytes)
    return "compute" if compute_seconds(flops, spec, dtype) >= memory_seconds(bytes, spec) else "memory"
