"""Typed tiling of the paged-attention kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

``pages_per_block`` is a request, fitted by the TPU kernel to the largest
divisor of the page-table width at most it, so every point runs at every size.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from mk.hardware import get_spec
from mk.kernels import validate
from mk.targets import kernel_language


@dataclass(frozen=True)
class Shapes:
    """q (N, Hq, D), pages (P, page, Hkv, D), page table (N, pages)."""

    seqs: int
    heads: int
    kv_heads: int
    head_dim: int
    page: int
    pages: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``pages_per_block``: pages one TPU grid step DMAs (per K and V); ``num_warps``/``num_stages``: Triton's."""

    pages_per_block: int = 8
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        validate.ints_in(self, ("pages_per_block",), 1, 64)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Every field is legal on every target (blocks are fitted); kept for the family contract."""
        kernel_language(target)

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"pages_per_block": self.pages_per_block}
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (data/hardware.json): TPU as many pages per step (up to 16) as keep the K and V page
    buffers (double-buffered) within the VMEM budget (`validate.vmem_budget`); GPU 4 warps (a group of query heads is small)."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        per_page = 2 * 2 * shapes.page * shapes.kv_heads * shapes.head_dim * shapes.itemsize
        ppb = 1
        for cand in (2, 4, 8, 16):
            if cand <= shapes.pages and cand * per_page <= budget:
                ppb = cand
        return Config(pages_per_block=ppb)
    return Config(num_warps=4)


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        out: dict[str, list[Any]] = {"pages_per_block": [p for p in (1, 4, 8, 16) if p <= max(1, shapes.pages)]}
    else:
        out = {"num_warps": [2, 4, 8]}
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out
