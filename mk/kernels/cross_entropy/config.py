"""Typed tiling of the cross-entropy kernels: frozen :class:`Config` (backward) and :class:`FwdConfig` (forward),
a per-chip default and the tuning space of each.

Block sizes are requests, fitted by the kernels (TPU: multiples of the sublane
tile and of 128; GPU: powers of two >= 16), the sizes zero-padded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mk.hardware import get_spec
from mk.kernels import validate
from mk.targets import kernel_language


@dataclass(frozen=True)
class Shapes:
    """x (T, H), W (H, V); ``itemsize`` of x."""

    t: int
    h: int
    v: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    block_t: int = 256
    block_v: int = 512
    num_warps: int = 4

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_t", "block_v"), 8, 8192)
        validate.launch(self, max_stages=None)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_t": 8, "block_v": 128}, ("block_t", "block_v"))

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_t": self.block_t, "block_v": self.block_v}
        return {"block_t": self.block_t, "block_v": self.block_v, "num_warps": self.num_warps}


def _tpu_bytes(s: Shapes, bt: int, bv: int) -> int:
    """VMEM of one backward step, the larger of its two kernels: x and W tiles double-buffered, the f32 logits tile
    and its dlogits block, the f32 copy of the tile the contraction reads (W's in the dx kernel, x's in the dW
    kernel) and the f32 output block it accumulates into, double-buffered (dx (block_t, H) or dW (H, block_v))."""
    inputs = 2 * (bt * s.h + s.h * bv) * s.itemsize + 3 * bt * bv * 4
    return inputs + max(s.h * bv * 4 + 2 * bt * s.h * 4, bt * s.h * 4 + 2 * s.h * bv * 4)


def default(chip: str, shapes: Shapes) -> Config:
    """TPU: the largest (block_t, block_v) fitting the VMEM budget (`validate.vmem_budget`); GPU: 32 x 64 tiles."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        best = (8, 128)
        for bt in (8, 16, 64, 128, 256, 512):
            for bv in (128, 256, 512, 1024, 2048):
                if _tpu_bytes(shapes, bt, bv) <= budget:
                    best = max(best, (bt, bv), key=lambda p: p[0] * p[1])
        return Config(block_t=best[0], block_v=best[1])
    return Config(block_t=32, block_v=64, num_warps=4)


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    if kernel_language(target) == "mosaic":
        out: dict[str, list[Any]] = {"block_t": [128, 256], "block_v": [256, 512, 1024]}
    else:
        out = {"block_t": [16, 32, 64], "block_v": [32, 64, 128], "num_warps": [4, 8]}
    return out


@dataclass(frozen=True)
class FwdConfig:
    """The forward's blocks: ``block_t`` tokens x ``block_v`` vocabulary columns per logits tile; on GPU the tile's
    product runs over ``block_h`` hidden chunks, with Triton's ``num_warps``."""

    block_t: int = 256
    block_v: int = 512
    block_h: int = 64
    num_warps: int = 4

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_t", "block_v", "block_h"), 8, 8192)
        validate.launch(self, max_stages=None)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_t": 8, "block_v": 128}, ("block_t", "block_v", "block_h"))

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_t": self.block_t, "block_v": self.block_v}
        return {"block_t": self.block_t, "block_v": self.block_v, "block_h": self.block_h, "num_warps": self.num_warps}


def _tpu_fwd_bytes(s: Shapes, bt: int, bv: int) -> int:
    """VMEM of one forward step: x and W tiles double-buffered and the f32 temporaries of the logits tile."""
    return 2 * (bt * s.h + s.h * bv) * s.itemsize + 4 * bt * bv * 4


def fwd_default(chip: str, shapes: Shapes) -> FwdConfig:
    """TPU: the largest (block_t, block_v) up to (256, 512) fitting the VMEM budget (`validate.vmem_budget`); GPU: 64 x 128 tiles over
    64-wide hidden chunks (smaller for small T or H)."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        best = (8, 128)
        for bt in (8, 16, 64, 128, 256):
            for bv in (128, 256, 512):
                if _tpu_fwd_bytes(shapes, bt, bv) <= budget:
                    best = max(best, (bt, bv), key=lambda p: p[0] * p[1])
        return FwdConfig(block_t=best[0], block_v=best[1])
    bt = 16
    while bt < 64 and bt < shapes.t:
        bt *= 2
    bh = 32 if shapes.h <= 32 else 64
    return FwdConfig(block_t=bt, block_v=128, block_h=bh, num_warps=4)


def fwd_space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    if kernel_language(target) == "mosaic":
        return {"block_t": [128, 256, 512], "block_v": [256, 512, 1024, 2048]}
    return {"block_t": [16, 32, 64], "block_v": [64, 128, 256], "block_h": [32, 64, 128], "num_warps": [4, 8]}
