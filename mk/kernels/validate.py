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
