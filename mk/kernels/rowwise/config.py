"""Typed tiling of the whole-rows kernels: a frozen :class:`Config`, the on-chip budgets, a default and the space.

``block_rows`` is a request, fitted by the kernels to the rows and to the
budget at trace time (TPU: a multiple of the sublane tile, else all the rows;
GPU: a power of two dividing the rows), so every point runs at every size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mk.kernels import validate
from mk.targets import kernel_language

#: on-chip bytes the double-buffered blocks of one grid step may use, per kernel language (``Target.kernel_language``;
#: "" for a target judged as plain JAX). Mosaic (TPU): two thirds of the smallest
#: scoped-VMEM budget of mk's chips (v5e: 3/4 of 16 MiB, `validate.vmem_budget`), the rest for the body's float32
#: temporaries: at 16 MiB the softmax example's blocks at full (8192 x 4096 f32) took 19.8 MiB, over v5e's limit.
BUDGET = {"mosaic": 8 * 2**20, "triton": 96 * 2**10 * 4, "": 64 * 2**20}


def budget(target: str) -> int:
    """:data:`BUDGET` for ``target``'s kernel language."""
    return BUDGET[kernel_language(target)]
_OPTIONS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class Shapes:
    """``nrows`` rows of ``row_bytes`` bytes (every row input and output); ``sublanes`` the row quantum of the
    narrowest row dtype (8 for 32-bit, 16 for 16-bit)."""

    nrows: int
    row_bytes: int
    sublanes: int = 8


@dataclass(frozen=True)
class Config:
    block_rows: int = 512
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
        if kernel_language(target) == "triton":
            return {"block_rows": self.block_rows, "num_warps": self.num_warps}
        return {"block_rows": self.block_rows}


def space(target: str, shapes: Shapes) -> list[int]:
    """Row-block sizes to tune over: those whose double-buffered rows fit the target's budget (at most the rows),
    the four largest."""
    fit = budget(target)
    options = [b for b in _OPTIONS if b >= shapes.sublanes or kernel_language(target) == "triton"]
    fits = [b for b in options if 2 * b * shapes.row_bytes <= fit and b <= max(shapes.nrows, options[0])]
    return (fits or options[:1])[-4:]


def default(target: str, shapes: Shapes) -> Config:
    """The largest row block of :func:`space`."""
    return Config(block_rows=space(target, shapes)[-1])
