"""Typed tiling of the retention kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

Block sizes are requests, fitted by the kernels to the sequence length (TPU:
the largest multiple of its tile dividing it; GPU: one power-of-two block for
queries and keys, the length zero-padded), so every point runs at every size.
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
    """q/k (B, H, S, D), v (B, H, S, Dv)."""

    b: int
    h: int
    s: int
    d: int
    dv: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``block_q`` query rows and ``block_k`` key rows per step (GPU: one block, the smaller of the two);
    ``num_warps``/``num_stages``: Triton's launch; ``smem_bytes``: the shared memory a GPU program may plan for (the
    chip's, `validate.smem_budget`), to which the Triton kernel shrinks its block at trace time (not tuned)."""

    block_q: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 2
    smem_bytes: int = 192 << 10

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_q", "block_k"), 8, 4096)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_q": 8, "block_k": 128}, ("block_q", "block_k"))

    def kwargs(self, target: str) -> dict[str, Any]:
        base = {"block_q": self.block_q, "block_k": self.block_k}
        if kernel_language(target) == "mosaic":
            return base
        return {**base, "num_warps": self.num_warps, "num_stages": self.num_stages, "smem_bytes": self.smem_bytes}


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (data/hardware.json). TPU: key blocks one or two MXU widths, query blocks as tall as
    the VMEM budget (`validate.vmem_budget`) allows for the (block_q, block_k) f32 scores, the q block and the accumulator;
    GPU: 64-row blocks (32 when the head is wider than 128) and the chip's shared-memory budget, to which the kernel
    shrinks the block at trace time when the sizes it is called with need it."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        mxu = spec.mxu_size or 128
        bk = 2 * mxu if shapes.s % (2 * mxu) == 0 else 128
        budget = validate.vmem_budget(spec)
        bq = 128
        for cand in (256, 512):
            work = cand * bk * 4 * 3 + 2 * cand * shapes.d * shapes.itemsize + cand * shapes.dv * 4
            if shapes.s % cand == 0 and work <= budget:
                bq = cand
        return Config(block_q=bq, block_k=bk)
    blk = 64 if max(shapes.d, shapes.dv) <= 128 else 32
    return Config(block_q=blk, block_k=blk, num_warps=4, smem_bytes=validate.smem_budget(spec))


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        out: dict[str, list[Any]] = {
            "block_q": [b for b in (64, 128, 256, 512) if b <= max(64, shapes.s)][-3:],
            "block_k": [b for b in (128, 256, 512) if b <= max(128, shapes.s)][-2:],
        }
    else:
        out = {"block_q": [b for b in (16, 32, 64) if b <= max(16, shapes.s)],
               "block_k": [64], "num_warps": [4, 8]}
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out
