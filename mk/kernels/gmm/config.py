"""Typed tiling of the grouped-matmul kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

Block sizes are requests: the kernels fit each to the sizes they are called
with (TPU: the largest multiple of its tile dividing the size; GPU: a power of
two, the size zero-padded), so every point of the space runs at every size.
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
    """lhs (M, K), rhs (G, K, N)."""

    m: int
    k: int
    n: int
    groups: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``block_m``/``block_n``/``block_k``: the tile of one product; ``num_warps``/``num_stages``: Triton's launch."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_m", "block_n", "block_k"), 8, 4096)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_m": 8, "block_n": 128, "block_k": 128}, ("block_m", "block_n", "block_k"))

    def kwargs(self, target: str) -> dict[str, Any]:
        base = {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k}
        return base if kernel_language(target) == "mosaic" else {**base, "num_warps": self.num_warps, "num_stages": self.num_stages}


def _pow2_floor(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (data/hardware.json). Row tiles no taller than the mean group (a tile two groups
    share is multiplied twice); TPU: block_n one or two MXU widths, block_k as deep as the VMEM budget (`validate.vmem_budget`) allows
    with double buffering; GPU: the largest (block_k, stages) pipeline that fits shared memory."""
    spec = get_spec(chip)
    mean_group = max(1, shapes.m // max(1, shapes.groups))
    if spec.kind == "tpu":
        mxu = spec.mxu_size or 128
        bm = max(8 * max(1, 4 // shapes.itemsize), min(512, _pow2_floor(mean_group)))
        bn = 2 * mxu if shapes.n % (2 * mxu) == 0 else 128
        budget = validate.vmem_budget(spec)
        bk = 128
        for cand in (256, 512, 1024):
            if shapes.k % cand == 0 and 2 * (bm * cand + cand * bn) * shapes.itemsize + 3 * bm * bn * 4 <= budget:
                bk = cand
        return Config(block_m=bm, block_n=bn, block_k=bk)
    smem = spec.shared_mem_per_sm_bytes or 96 << 10
    bm = max(16, min(128, _pow2_floor(mean_group)))
    bn = 128 if shapes.n >= 128 else 64
    bk, stages = 32, 2
    for cand_k, cand_s in ((64, 3), (64, 2)):
        if cand_s * (bm * cand_k + cand_k * bn) * shapes.itemsize <= smem // 2:
            bk, stages = cand_k, cand_s
            break
    return Config(block_m=bm, block_n=bn, block_k=bk, num_warps=8 if bm * bn >= 128 * 128 else 4, num_stages=stages)


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        sub = 8 * max(1, 4 // shapes.itemsize)
        out: dict[str, list[Any]] = {
            "block_m": [b for b in (sub, 64, 128, 256) if b >= sub and b <= max(sub, shapes.m)][-3:],
            "block_n": [b for b in (128, 256, 512) if b <= max(128, shapes.n)][-2:],
            "block_k": [b for b in (128, 256, 512) if b <= max(128, shapes.k)][-2:],
        }
    else:
        out = {"block_m": [b for b in (16, 32, 64, 128) if b <= max(16, shapes.m)][-3:],
               "block_n": [b for b in (32, 64, 128) if b <= max(32, shapes.n)][-2:],
               "block_k": [b for b in (16, 32, 64) if b <= max(16, shapes.k)][-2:],
               "num_warps": [4, 8]}
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out
