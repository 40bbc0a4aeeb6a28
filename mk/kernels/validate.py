"""The checks every kernel family's ``Config`` shares: block sizes in range, Triton's launch parameters, and the
tile rules of each kernel language (Mosaic: multiples of the (8, 128) tile; Triton: powers of two)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from mk.targets import kernel_language


def ints_in(cfg: Any, names: Iterable[str], lo: int, hi: int) -> None:
    """Each field in ``names`` is an int in ``[lo, hi]``."""
    for name in names:
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")


def launch(cfg: Any, *, max_stages: int | None = 5) -> None:
    """Triton's ``num_warps`` (a power of two up to 16) and, unless ``max_stages`` is None, ``num_stages``."""
    if cfg.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be a power of two in [1, 16], got {cfg.num_warps!r}")
    if max_stages is not None and (not isinstance(cfg.num_stages, int) or not 1 <= cfg.num_stages <= max_stages):
        raise ValueError(f"num_stages must be an int in [1, {max_stages}], got {cfg.num_stages!r}")


def tiles(cfg: Any, target: str, tpu: Mapping[str, int], gpu: Iterable[str], gpu_min: int = 16) -> None:
    """Blocks legal on ``target``: on Mosaic each field of ``tpu`` a multiple of its value; on Triton each field of
    ``gpu`` a power of two of at least ``gpu_min``."""
    lang = kernel_language(target)
    if lang == "mosaic" and any(getattr(cfg, n) % m for n, m in tpu.items()):
        rules = ", ".join(f"{n} a multiple of {m}" for n, m in tpu.items())
        raise ValueError(f"TPU blocks: {rules}, got {cfg}")
    if lang == "triton" and any((b := getattr(cfg, n)) & (b - 1) or b < gpu_min for n in gpu):
        raise ValueError(f"GPU blocks must be powers of two >= {gpu_min}, got {cfg}")


#: the share of a kernel's VMEM allowance a default configuration plans to fill (headroom for what the
#: families' estimates leave out: Mosaic's internal scratch, relayouts, semaphores)
VMEM_SHARE = 0.75


def vmem_budget(spec: Any, share: float = VMEM_SHARE) -> int:
    """Bytes of VMEM a TPU kernel's default blocks may plan for: ``share`` of the scoped VMEM a kernel gets
    without ``vmem_limit_bytes`` (XLA's per-chip default, ``data/hardware.json``), never more than the
    physical VMEM. The one place a family's default asks how much VMEM it has; blocks sized to the physical
    VMEM (128 MiB on v5e) fail Mosaic's scoped-allocation check on the chip."""
    physical = spec.vmem_bytes or 16 << 20
    scoped = spec.scoped_vmem_default_bytes or min(physical, 16 << 20)
    return int(min(scoped, physical) * share)


#: the share of a GPU block's opt-in shared memory a default configuration plans to fill (headroom for what the
#: families' estimates leave out: Triton's layout conversions, reduction scratch, barriers)
SMEM_SHARE = 0.85


def smem_budget(spec: Any, share: float = SMEM_SHARE) -> int:
    """Bytes of shared memory a GPU kernel's blocks may plan for: ``share`` of the most one block may opt in to
    (``compile.shared_memory_per_block_optin_bytes`` in data/hardware.json: 227 KiB on H100/H200), else of the
    per-SM figure, else of 99 KiB. The kernels get this number and fit their blocks to it at trace time, from the
    sizes they are called with."""
    optin = (getattr(spec, "compile", None) or {}).get("shared_memory_per_block_optin_bytes")
    total = optin or spec.shared_mem_per_sm_bytes or 99 << 10
    return int(int(total) * share)
