"""Typed tiling of the norm backward kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

``block_rows`` is a request, fitted by the kernels to the rows they are given
(TPU: a multiple of the sublane tile; GPU: a power of two), rows zero-padded to
a multiple of it, so every point of the space runs at every size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mk.hardware import get_spec
from mk.kernels import validate
from mk.targets import kernel_language


@dataclass(frozen=True)
class Shapes:
    """x (N, D) rows; ``itemsize`` of x."""

    n: int
    d: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``block_rows`` rows per grid step; ``num_warps``: Triton's launch."""

    block_rows: int = 256
    num_warps: int = 4

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_rows",), 1, 8192)
        validate.launch(self, max_stages=None)

    def check(self, target: str) -> None:
        if kernel_language(target) == "mosaic" and self.block_rows % 8:
            raise ValueError(f"TPU row blocks must be multiples of 8, got {self}")
        if kernel_language(target) == "triton" and self.block_rows & (self.block_rows - 1):
            raise ValueError(f"GPU row blocks must be powers of two, got {self}")

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_rows": self.block_rows}
        return {"block_rows": self.block_rows, "num_warps": self.num_warps}


def _tpu_bytes(s: Shapes, bm: int) -> int:
    """VMEM of one step: x, g and dx blocks double-buffered, plus f32 temporaries of the block."""
    return 2 * 3 * bm * s.d * s.itemsize + 4 * bm * s.d * 4


def default(chip: str, shapes: Shapes) -> Config:
    """TPU: the largest row block (a multiple of 8, up to 1024) whose working set fits the VMEM budget (`validate.vmem_budget`); GPU: a
    power-of-two block keeping about 16K f32 values per program (registers), 4 or 8 warps."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        best = 8
        for bm in (8, 16, 32, 64, 128, 256, 512, 1024):
            if bm <= max(8, shapes.n) and _tpu_bytes(shapes, bm) <= budget:
                best = bm
        return Config(block_rows=best)
    dp = 1 << max(0, (shapes.d - 1).bit_length())
    bm = max(1, min(64, (16384 // dp) or 1))
    return Config(block_rows=bm, num_warps=8 if dp >= 4096 else 4)


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        out: dict[str, list[Any]] = {"block_rows": [b for b in (8, 32, 128, 512) if b <= max(8, shapes.n)][-3:]}
    else:
        out = {"block_rows": [b for b in (1, 4, 16, 64) if b <= max(1, shapes.n)][-3:], "num_warps": [4, 8]}
    for bm in out["block_rows"]:
        Config(block_rows=bm).check(target)
    return out


@dataclass(frozen=True)
class TwoPassConfig:
    """The two-pass row reduction's blocks: ``block_rows`` rows x ``block_cols`` columns per step (TPU: multiples
    of 8 and 128, GPU: powers of two); ``num_warps``: Triton's launch."""

    block_rows: int = 64
    block_cols: int = 2048
    num_warps: int = 4

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_rows",), 1, 8192)
        validate.ints_in(self, ("block_cols",), 16, 1 << 20)
        validate.launch(self, max_stages=None)

    def check(self, target: str) -> None:
        if kernel_language(target) == "mosaic" and (self.block_rows % 8 or self.block_cols % 128):
            raise ValueError(f"TPU two-pass blocks: block_rows a multiple of 8, block_cols of 128, got {self}")
        if kernel_language(target) == "triton" and any(b & (b - 1) for b in (self.block_rows, self.block_cols)):
            raise ValueError(f"GPU two-pass blocks must be powers of two, got {self}")

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_rows": self.block_rows, "block_cols": self.block_cols}
        return {"block_rows": self.block_rows, "block_cols": self.block_cols, "num_warps": self.num_warps}


def two_pass_default(chip: str, shapes: Shapes) -> TwoPassConfig:
    """TPU: 64 x 2048 blocks (16 rows for 16-bit data); GPU: 16 rows x 1024 columns per program."""
    if get_spec(chip).kind == "tpu":
        return TwoPassConfig(block_rows=64, block_cols=2048)
    return TwoPassConfig(block_rows=16, block_cols=1024, num_warps=4)


def two_pass_space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The two-pass tuning space (the row block fitted to the rows, so every point runs at every size)."""
    if kernel_language(target) == "mosaic":
        sub = 8 * max(1, 4 // shapes.itemsize)
        return {"block_rows": [sub, 64, 256], "block_cols": [512, 2048, 8192]}
    return {"block_rows": [1, 4, 16], "block_cols": [256, 1024, 4096]}
