"""Typed tiling of the matmul kernels: a frozen :class:`Config`, a per-chip default and the tuning space.

Block sizes are requests, fitted by the kernels to the sizes they are called
with (TPU: the largest multiple of its tile dividing the size, or the whole
axis; GPU: a power of two, the size zero-padded), so every point of the space
runs at every size. The space lists values of :class:`Config`'s own fields.
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
    """x (M, K), w (K, N). ``itemsize``: of the narrowest array tiled along rows (x, the output, row and tile
    parameters); ``full_n``: the epilogue reduces or reshapes along N, so a program holds whole rows."""

    m: int
    n: int
    k: int
    itemsize: int = 4
    full_n: bool = False

    @property
    def sublanes(self) -> int:
        """Rows per TPU sublane tile of the narrowest row dtype (8 for 32-bit, 16 for 16-bit)."""
        return 8 * max(1, 4 // self.itemsize)


@dataclass(frozen=True)
class Config:
    """``block_m`` rows, ``block_n`` columns (ignored with whole rows) and ``block_k`` of K per step;
    ``k_splits``: slabs of K of the split-K kernels; ``num_warps``/``num_stages``: Triton's launch."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128
    k_splits: int = 4
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        validate.ints_in(self, ("block_m", "block_n", "block_k"), 8, 8192)
        validate.ints_in(self, ("k_splits",), 1, 64)
        validate.launch(self)

    def check(self, target: str) -> None:
        """Raise ``ValueError`` when a block is not a legal request on ``target``."""
        validate.tiles(self, target, {"block_m": 8, "block_n": 128, "block_k": 128}, ("block_m", "block_n", "block_k"))

    def kwargs(self, target: str, splitk: bool = False) -> dict[str, Any]:
        """The keyword arguments of the target's kernel (``splitk``: of the split-K kernel)."""
        out: dict[str, Any] = {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k}
        if splitk:
            out["k_splits"] = self.k_splits
        if kernel_language(target) == "triton":
            out.update(num_warps=self.num_warps, num_stages=self.num_stages)
        return out


def space(target: str, shapes: Shapes, splitk: bool = False) -> dict[str, list[Any]]:
    """The tuning space over :class:`Config`'s fields, every point legal for ``target``: at most three block
    sizes per axis, the largest that the sizes can use; no ``block_n`` with whole rows; ``k_splits`` for
    split-K."""
    if kernel_language(target) == "mosaic":
        sub = shapes.sublanes
        bm = [b for b in (8, 16, 32, 64, 128, 256) if b >= sub]
        bm = [b for b in bm if b <= max(shapes.m, bm[0])][-3:]
        bn = [b for b in (128, 256, 512) if b <= max(shapes.n, 128)][-3:]
        bk = [b for b in (128, 256, 512) if b <= max(shapes.k, 128)][-3:]
    else:
        bm = [b for b in (16, 32, 64, 128) if b <= max(shapes.m, 16)][-3:]
        bn = [b for b in (32, 64, 128) if b <= max(shapes.n, 32)][-3:]
        bk = [b for b in (16, 32, 64) if b <= max(shapes.k, 16)][-2:]
    out: dict[str, list[Any]] = {"block_m": bm, "block_k": bk}
    if splitk or not shapes.full_n:
        out["block_n"] = bn
    if splitk:
        out["k_splits"] = [2, 4, 8]
    for vals in itertools.product(*out.values()):
        Config(**dict(zip(out, vals))).check(target)
    return out


def _tpu_bytes(s: Shapes, bm: int, bn: int, bk: int) -> int:
    """VMEM of one step: x and w blocks and the output block double-buffered, the f32 accumulator; with whole rows
    the accumulator and output span N and the epilogue gets one more f32 copy of the rows. Within 1% of Mosaic's
    scoped-VMEM figure for JaxBench's full sizes (e.g. 4096x8192x8192 f32, whole rows, 16x128 blocks: 10.03 MiB
    estimated by tpu.matmul_vmem_bytes, 10.13 MiB compiled for v5e). The kernel plans its blocks again at trace time
    for the sizes it is called with (mk/kernels/matmul/tpu.py, ``matmul_blocks``): this only picks the requests."""
    bn = s.n if s.full_n else bn
    acc = bm * bn * 4 * (2 if s.full_n else 1)
    return 2 * (bm * bk + bk * bn) * s.itemsize + 2 * bm * bn * s.itemsize + acc


def _gpu_bytes(s: Shapes, bm: int, bn: int, bk: int, stages: int) -> int:
    """Shared memory of the K loop: ``stages`` buffered (block_m, block_k) and (block_k, block_n) slices."""
    return stages * (bm * bk + bk * bn) * s.itemsize


def default(chip: str, shapes: Shapes, splitk: bool = False) -> Config:
    """A tiling for ``chip`` (data/hardware.json): the largest point of :func:`space` whose working set fits the
    VMEM budget (TPU, `validate.vmem_budget`) or its shared memory per SM (GPU, with ``num_stages`` buffers) and,
    for float32 operands, registers (:func:`_gpu_registers_fit`)."""
    spec = get_spec(chip)
    target = "tpu" if spec.kind == "tpu" else "gpu"
    sp = space(target, shapes, splitk)
    base = Config()
    if spec.kind == "tpu":
        budget = validate.vmem_budget(spec)
        fits = lambda bm, bn, bk: _tpu_bytes(shapes, bm, bn, bk) <= budget  # noqa: E731
    else:
        budget = spec.shared_mem_per_sm_bytes or 96 << 10
        fits = lambda bm, bn, bk: (_gpu_bytes(shapes, bm, bn, bk, base.num_stages) <= budget  # noqa: E731
                                   and _gpu_registers_fit(shapes, bm, bn, bk, base.num_warps))
    bns = sp.get("block_n", [base.block_n])
    best = (sp["block_m"][0], bns[0], sp["block_k"][0])
    for bm, bn, bk in itertools.product(sp["block_m"], bns, sp["block_k"]):
        if fits(bm, bn, bk) and (bm * bn * bk, bm, bn) >= (best[0] * best[1] * best[2], best[0], best[1]):
            best = (bm, bn, bk)
    return Config(block_m=best[0], block_n=best[1], block_k=best[2])


def _gpu_registers_fit(s: Shapes, bm: int, bn: int, bk: int, num_warps: int) -> bool:
    """A float32 dot at HIGHEST is an FMA sequence on Triton (no tensor cores) with its operand slices in registers:
    ``block_k`` <= 32, and the accumulator and both slices at most 112 float32 values a thread. Measured for H100
    (f32, HIGHEST, 4 warps unless said), at 4096^3: 128x128x64 (256 values a thread) 255 registers and 4,928 B of
    spill stores, 64x128x64 (160) 255 and 1,852 B; 128x64x32 and 64x128x32 (112) 164 and 167 registers, 128x128x32 with
    8 warps (96) 151, none spilling; at JaxBench's full sizes (evals/results/full_compile.md, 2026-12-07) 16x128x64
    (88 values a thread) still spilled about 3.9 KB: so block_k is bounded on its own. 16-bit operands run on
    tensor cores: shared memory bounds them."""
    return s.itemsize < 4 or (bk <= 32 and bm * bn + bm * bk + bk * bn <= 112 * 32 * num_warps)
