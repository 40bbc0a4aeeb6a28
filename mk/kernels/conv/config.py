"""Typed tiling of the convolution kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

The space is derived from the same fields as the config (one list per field
that matters for the target and shapes), so every point of it is a valid
``Config`` and a tuner can hand its points straight to the kernels.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from mk.hardware import get_spec
from mk.kernels import validate
from mk.targets import kernel_language


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class Shapes:
    """What the tiling depends on: x (N, *S, Cin) and w (*K, Cin, Cout), channels last."""

    batch: int
    spatial: tuple[int, ...]
    window: tuple[int, ...]
    cin: int
    cout: int
    itemsize: int = 4
    #: an epilogue runs on the finished tile: a program then holds every output channel
    fused_epilogue: bool = False

    @classmethod
    def of(cls, x_shape: tuple[int, ...], w_shape: tuple[int, ...], itemsize: int = 4,
           fused_epilogue: bool = False) -> "Shapes":
        s = len(x_shape) - 2
        if not 1 <= s <= 3 or len(w_shape) != s + 2 or x_shape[-1] != w_shape[s]:
            raise ValueError(f"expected x (N, *S, Cin) and w (*K, Cin, Cout) with 1-3 spatial axes, got "
                             f"{x_shape=}, {w_shape=}")
        return cls(x_shape[0], tuple(x_shape[1:-1]), tuple(w_shape[:s]), w_shape[s], w_shape[s + 1], itemsize,
                   fused_epilogue)

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple(n - k + 1 for n, k in zip(self.spatial, self.window))


@dataclass(frozen=True)
class Config:
    """Tiling of one convolution. ``block_cout``: output channels per program (None: all of them; only without
    a fused epilogue may it split them); ``unroll`` (TPU): output rows per loop step; ``num_warps`` and
    ``num_stages`` (GPU): Triton's launch parameters; ``smem_bytes`` (GPU): the chip's shared-memory budget
    (`validate.smem_budget`), to which the Triton kernel fits its rows and channels per program at trace time."""

    block_cout: int | None = None
    unroll: int = 1
    num_warps: int = 4
    num_stages: int = 1
    smem_bytes: int = 192 << 10

    def __post_init__(self) -> None:
        if self.block_cout is not None and (not isinstance(self.block_cout, int) or self.block_cout < 1):
            raise ValueError(f"block_cout must be a positive int or None, got {self.block_cout!r}")
        if not isinstance(self.unroll, int) or not 1 <= self.unroll <= 16:
            raise ValueError(f"unroll must be an int in [1, 16], got {self.unroll!r}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be a power of two in [1, 16], got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 4:
            raise ValueError(f"num_stages must be an int in [1, 4], got {self.num_stages!r}")

    def check(self, target: str, shapes: Shapes) -> None:
        """Raise ``ValueError`` when this tiling cannot run ``shapes`` on ``target``."""
        bc = self.block_cout
        if bc is None or bc == shapes.cout:
            return
        if shapes.fused_epilogue:
            raise ValueError(f"block_cout={bc}: a fused epilogue needs all {shapes.cout} output channels per program")
        if kernel_language(target) == "mosaic" and (shapes.cout % bc or bc % 128):
            raise ValueError(f"block_cout={bc} must divide Cout={shapes.cout} and be a multiple of 128 on TPU")
        if kernel_language(target) == "triton" and (bc & (bc - 1) or bc < 16):
            raise ValueError(f"block_cout={bc} must be a power of two >= 16 on GPU")

    def kwargs(self, target: str) -> dict[str, Any]:
        """The keyword arguments the target's kernel takes."""
        if kernel_language(target) == "mosaic":
            return {"block_cout": self.block_cout, "unroll": self.unroll}
        return {"block_cout": self.block_cout, "num_warps": self.num_warps, "num_stages": self.num_stages,
                "smem_bytes": self.smem_bytes}


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (a name in data/hardware.json) read from its memory sizes.

    TPU: the kernel's own planner (:func:`mk.kernels.conv.tpu.conv_blocks`, also run at trace time for the shapes a
    kernel is called with): all output channels per program unless no row block fits the VMEM budget
    (`validate.vmem_budget`) with them, then the widest multiple of 128 dividing Cout that does; short output rows
    (under one MXU width) are unrolled two at a time. GPU: one channel block of at most 128; 8 warps once the register tile or the padded sample is
    large against shared memory."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        from mk.kernels.conv.tpu import conv_blocks

        unroll = 2 if shapes.out_spatial[-1] < (spec.mxu_size or 128) else 1
        # the kernel plans the rows per program itself, for the shapes it is called with (the same planner)
        x_shape = (shapes.batch, *shapes.spatial, shapes.cin)
        w_shape = (*shapes.window, shapes.cin, shapes.cout)
        _, bc, _ = conv_blocks(x_shape, w_shape, budget=validate.vmem_budget(spec), itemsize=shapes.itemsize,
                               out_itemsize=4, epilogue=shapes.fused_epilogue, unroll=unroll)
        return Config(block_cout=None if bc == shapes.cout else bc, unroll=unroll)
    cout_p = max(16, _pow2(shapes.cout))
    bc = None if shapes.fused_epilogue or cout_p <= 128 else 128
    tile = math.prod(_pow2(o) for o in shapes.out_spatial) * (bc or cout_p)
    sample = math.prod(_pow2(n + 2) for n in shapes.spatial) * max(16, _pow2(shapes.cin)) * shapes.itemsize
    smem = spec.shared_mem_per_sm_bytes or 96 << 10
    return Config(block_cout=bc, num_warps=8 if tile > 8192 or sample > smem // 4 else 4,
                  smem_bytes=validate.smem_budget(spec))


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space: for each :class:`Config` field that can vary here, the values worth trying."""
    out: dict[str, list[Any]] = {}
    if not shapes.fused_epilogue:
        if kernel_language(target) == "mosaic":
            opts = [b for b in range(128, shapes.cout, 128) if shapes.cout % b == 0][-2:]
        else:
            opts = [b for b in (32, 64, 128) if b < max(16, _pow2(shapes.cout))]
        if opts:
            out["block_cout"] = [*opts, None]
    if kernel_language(target) == "mosaic":
        rows = math.prod(shapes.out_spatial[:-1])
        out["unroll"] = [u for u in (1, 2, 4) if u <= max(1, rows)]
    else:
        out["num_warps"] = [4, 8]
    for point in _points(out):  # every point is a valid Config for these shapes
        Config(**point).check(target, shapes)
    return out


def _points(sp: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(sp)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(sp[k] for k in keys))]
