"""Typed tiling of the SwiGLU kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

Block sizes are requests, fitted by the kernels to the sizes they are called
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
    """x (M, E), wg/wu (E, F), wd (F, D)."""

    m: int
    e: int
    f: int
    d: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``block_m`` rows and ``block_f`` hidden units per step; ``block_n`` (GPU) output columns per program;
    ``block_e`` (GPU) the width of the E blocks the gate and up products accumulate over;
    ``num_warps``/``num_stages``: Triton's launch; ``smem_bytes`` (GPU): the shared memory a program may plan for
    (the chip's, `validate.smem_budget`), to which the Triton kernel shrinks its blocks at trace time from the
    sizes it is called with (not tuned)."""

    block_m: int = 128
    block_f: int = 256
    block_n: int = 128
    block_e: int = 64
    num_warps: int = 4
    num_stages: int = 2
    smem_bytes: int = 192 << 10

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_m", "block_f", "block_n", "block_e"), 8, 8192)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_m": 8, "block_f": 128}, ("block_m", "block_f", "block_n", "block_e"))

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_m": self.block_m, "block_f": self.block_f}
        return {"block_m": self.block_m, "block_f": self.block_f, "block_n": self.block_n, "block_e": self.block_e,
                "num_warps": self.num_warps, "num_stages": self.num_stages, "smem_bytes": self.smem_bytes}


def _tpu_bytes(s: Shapes, bm: int, bf: int) -> int:
    """VMEM of one step: x block, three weight slices (double-buffered), the f32 accumulator and output block."""
    return 2 * (bm * s.e + 2 * s.e * bf + bf * s.d) * s.itemsize + bm * s.d * 4 + 2 * bm * s.d * s.itemsize


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (data/hardware.json): TPU the largest (block_m, block_f) whose working set fits the VMEM
    budget (`validate.vmem_budget`), block_f a multiple of the MXU width; GPU 64-row blocks with block_n covering D up to
    128, E in blocks of 64, and the chip's shared-memory budget (`validate.smem_budget`), to which the kernel shrinks
    those requests at trace time."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        mxu = spec.mxu_size or 128
        sub = 8 * max(1, 4 // shapes.itemsize)
        best = (sub, 128)
        for bm, bf in itertools.product((sub, 32, 64, 128, 256, 512), (mxu, 2 * mxu, 4 * mxu)):
            if sub <= bm <= max(shapes.m, sub) and bf <= max(shapes.f, 128) and _tpu_bytes(shapes, bm, bf) <= budget:
                best = max(best, (bm, bf), key=lambda t: t[0] * t[1])
        return Config(block_m=best[0], block_f=best[1])
    bn = 128 if shapes.d >= 128 else 64
    return Config(block_m=64, block_f=64, block_n=bn, block_e=64, num_warps=8 if bn == 128 else 4,
                  smem_bytes=validate.smem_budget(spec))


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        sub = 8 * max(1, 4 // shapes.itemsize)
        out: dict[str, list[Any]] = {
            "block_m": [b for b in (sub, 64, 128, 256) if b >= sub and b <= max(sub, shapes.m)][-3:],
            "block_f": [b for b in (128, 256, 512) if b <= max(128, shapes.f)][-3:],
        }
    else:
        out = {"block_m": [b for b in (16, 32, 64) if b <= max(16, shapes.m)][-2:],
               "block_f": [b for b in (32, 64) if b <= max(32, shapes.f)],
               "block_n": [b for b in (64, 128) if b <= max(64, shapes.d)],
               "num_warps": [4, 8]}
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out
