"""Typed tiling of the ragged paged-attention kernels: a frozen :class:`Config`, a per-chip default and the tuning
space.

``block_q`` is the number of query tokens one program owns (the TPU kernel
rounds it up so its rows fill whole sublane tiles, the GPU kernel to a power
of two); ``pages_per_block`` the pages one TPU step copies and computes at
once (fitted to at most the page-table width), so every point runs at every
size.
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
    """queries (T, Hq, D), kv_pages (P, page, 2 * Hkv, D), page table (S, pages)."""

    tokens: int
    heads: int
    kv_heads: int
    head_dim: int
    page: int
    pages: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``block_q``: query tokens per program; ``pages_per_block``: pages one TPU step copies (K and V);
    ``num_warps``/``num_stages``: Triton's."""

    block_q: int = 32
    pages_per_block: int = 8
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_q",), 1, 1024)
        validate.ints_in(self, ("pages_per_block",), 1, 64)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Every field is legal on every target (blocks are fitted); kept for the family contract."""
        kernel_language(target)

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_q": self.block_q, "pages_per_block": self.pages_per_block}
        return {"block_q": self.block_q, "num_warps": self.num_warps, "num_stages": self.num_stages}


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tpu_vmem(shapes: Shapes, block_q: int, pages_per_block: int) -> int:
    """Bytes of VMEM the TPU kernel plans for: the query and output blocks (double-buffered), the K and V page
    buffers (two slots), the running max and sum (lane-padded), the f32 accumulator and score tiles."""
    group = shapes.heads // max(1, shapes.kv_heads)
    rows = block_q * group
    kblk = pages_per_block * shapes.page
    blocks = 2 * 2 * rows * shapes.head_dim * shapes.itemsize
    kv = 2 * 2 * kblk * shapes.head_dim * shapes.itemsize
    stats = 2 * rows * 128 * 4
    return blocks + kv + stats + rows * shapes.head_dim * 4 + 3 * rows * kblk * 4


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (data/hardware.json): TPU up to 128 query tokens per program and key blocks of up to
    256 slots, the largest whose working set (``tpu_vmem``) fits the VMEM budget (`validate.vmem_budget`); GPU
    about 128 query rows (tokens times the padded group) per program, 4 warps."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        best = (8, 1)
        for bq, ppb in itertools.product((8, 16, 32, 64, 128), (1, 2, 4, 8, 16)):
            if bq > max(8, shapes.tokens) or ppb > max(1, shapes.pages) or ppb * shapes.page > 256:
                continue
            if tpu_vmem(shapes, bq, ppb) <= budget:
                best = max(best, (bq, ppb))
        return Config(block_q=best[0], pages_per_block=best[1])
    group = _pow2(max(1, shapes.heads // max(1, shapes.kv_heads)))
    bq = max(1, min(128 // group if group < 128 else 1, _pow2(max(1, shapes.tokens))))
    return Config(block_q=bq, num_warps=4)


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        out: dict[str, list[Any]] = {
            "block_q": [b for b in (16, 32, 64, 128) if b <= max(16, shapes.tokens)],
            "pages_per_block": [p for p in (4, 8, 16) if p <= max(4, shapes.pages)]}
    else:
        out = {"block_q": [b for b in (4, 8, 16, 32) if b <= max(4, _pow2(shapes.tokens))],
               "num_warps": [4, 8]}
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out
