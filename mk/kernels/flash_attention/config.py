"""Typed tiling of the flash-attention kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

Block sizes are requests, fitted by the kernels to the sizes they are called
with (TPU: the largest multiple of its tile dividing the sequence; GPU: a power
of two, the sequence zero-padded), so every point of the space runs at every size.
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
    """q (B, H, Sq, D), k/v (B, Hkv, Sk, D)."""

    batch: int
    heads: int
    seq: int
    kv_seq: int
    head_dim: int
    itemsize: int = 2


@dataclass(frozen=True)
class Config:
    """``block_q`` query rows and ``block_k`` keys per step; ``num_warps``/``num_stages``: Triton's launch;
    ``smem_bytes``: the shared memory a GPU program may plan for (the chip's, `validate.smem_budget`), which the
    Triton kernel fits its blocks to at trace time from the sizes it is called with (not tuned)."""

    block_q: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 2
    smem_bytes: int = 192 << 10

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_q", "block_k"), 8, 8192)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_q": 8, "block_k": 128}, ("block_q", "block_k"))

    def kwargs(self, target: str) -> dict[str, Any]:
        if kernel_language(target) == "mosaic":
            return {"block_q": self.block_q, "block_k": self.block_k}
        return {"block_q": self.block_q, "block_k": self.block_k, "num_warps": self.num_warps,
                "smem_bytes": self.smem_bytes}


def _pow2_floor(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def default(chip: str, shapes: Shapes) -> Config:
    """A tiling for ``chip`` (data/hardware.json): TPU query and key blocks of up to four MXU widths whose
    working set (q, k, v blocks double-buffered, the f32 score tile and accumulator) fits the VMEM budget (`validate.vmem_budget`);
    GPU 64-key blocks and query blocks of up to 128 rows, 8 warps for 128-row blocks, and the chip's shared-memory
    budget, to which the kernel shrinks those requests at trace time when a head_dim needs it."""
    spec = get_spec(chip)
    if spec.kind == "tpu":
        mxu = spec.mxu_size or 128
        budget = validate.vmem_budget(spec)
        best = (mxu, mxu)
        for bq, bk in itertools.product((mxu, 2 * mxu, 4 * mxu), repeat=2):
            work = 2 * (bq + 2 * bk) * shapes.head_dim * shapes.itemsize + (bq * bk + bq * shapes.head_dim) * 4
            if bq <= max(mxu, shapes.seq) and bk <= max(mxu, shapes.kv_seq) and work <= budget:
                best = max(best, (bq, bk), key=lambda t: t[0] * t[1])
        return Config(block_q=best[0], block_k=best[1])
    bq = max(16, min(128, _pow2_floor(shapes.seq)))
    bk = max(16, min(64, _pow2_floor(shapes.kv_seq)))
    return Config(block_q=bq, block_k=bk, num_warps=8 if bq >= 128 else 4, smem_bytes=validate.smem_budget(spec))


def space(target: str, shapes: Shapes) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``."""
    if kernel_language(target) == "mosaic":
        out: dict[str, list[Any]] = {"block_q": [b for b in (128, 256, 512) if b <= max(128, shapes.seq)],
                                     "block_k": [b for b in (128, 256, 512) if b <= max(128, shapes.kv_seq)]}
    else:
        out = {"block_q": [b for b in (16, 32, 64, 128) if b <= max(16, shapes.seq)][-3:],
               "block_k": [b for b in (16, 32, 64, 128) if b <= max(16, shapes.kv_seq)][-3:],
               "num_warps": [4, 8]}
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out
