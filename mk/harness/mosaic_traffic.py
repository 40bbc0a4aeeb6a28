"""The HBM traffic of a Mosaic kernel's pipelined blocks, read from the compiled program (trusted side).

A Pallas TPU kernel's ``tpu_custom_call`` carries its Mosaic module (``custom_call_config.body``, MLIR bytecode). Its
main function declares the grid (``iteration_bounds``) and, per operand, a window: the block shape
(``window_bounds``) and the function that maps grid indices to the block's index (``transform_indices``). The
pipeline copies an input block in when its index differs from the previous grid step's, and writes an output block
back when it changes, so over the grid (row-major, the last axis fastest) each window moves

    (number of index changes, the first step included) x block bytes

while the arrays themselves hold (number of distinct indices) x block bytes. The difference is what the kernel
fetches again (a matmul's A row block, re-read for every column block): XLA's ``bytes accessed`` counts a custom
call's operands once, so the estimate (:mod:`mk.harness.estimate`) adds it.

The index functions are evaluated here over every grid point at once (numpy, integer ``arith`` operations only).
A kernel whose windows read scalar-prefetch values, use operations outside that set, have no window (``pl.ANY``:
the kernel's own DMAs) or a grid above :data:`MAX_POINTS` gives ``None`` for that window: unknown, never guessed.
This reads a program the judge already checked; it runs no candidate code.
"""

from __future__ import annotations

import base64
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: grids with more points than this are not walked (their windows' traffic is unknown)
MAX_POINTS = 1 << 22

_Q = r'(?:\\?"|\\22)'  # a quote as compiled HLO text (" or \") or exported MLIR text (\22) writes it
_BODY = re.compile(_Q + r"body" + _Q + r"\s*:\s*" + _Q + r"([A-Za-z0-9+/=]+)")
_ITEMSIZE = {"f32": 4, "i32": 4, "ui32": 4, "si32": 4, "bf16": 2, "f16": 2, "i16": 2, "i8": 1, "si8": 1, "ui8": 1,
             "f8E4M3FN": 1, "f8E5M2": 1, "f8E4M3B11FNUZ": 1, "i1": 1, "f64": 8, "i64": 8, "i4": 0.5}


@dataclass(frozen=True)
class Window:
    """One operand's blocks over the grid: bytes moved (index changes x block bytes), and bytes distinct."""

    moved_bytes: int
    distinct_bytes: int


@dataclass(frozen=True)
class Traffic:
    """A kernel's grid and each operand's window (None: its traffic is not known)."""

    grid: tuple[int, ...]
    windows: tuple[Window | None, ...]

    @property
    def refetched_bytes(self) -> int:
        """Bytes moved beyond each known window's distinct blocks once (what XLA's count leaves out)."""
        return sum(w.moved_bytes - w.distinct_bytes for w in self.windows if w is not None)


def body_of(backend_config: str) -> bytes | None:
    """The Mosaic module's bytecode in a ``tpu_custom_call``'s backend config (a line of an exported module's MLIR
    text, or of compiled HLO text where the compiler kept it)."""
    m = _BODY.search(backend_config)
    return base64.b64decode(m.group(1)) if m else None


def refetched_bytes(module_text: str) -> int:
    """The blocks fetched again by every Mosaic kernel of an exported program (its MLIR text), in bytes."""
    found = (traffic(body) for line in module_text.splitlines() if "tpu_custom_call" in line
             if (body := body_of(line)) is not None)
    return sum(t.refetched_bytes for t in found if t is not None)


def traffic(body: bytes) -> Traffic | None:
    """The traffic of the kernel in Mosaic bytecode ``body``; None when it cannot be read."""
    try:
        from jax._src.lib.mlir import ir
        from jaxlib.mosaic.python import tpu

        ctx = ir.Context()
        ctx.allow_unregistered_dialects = True
        tpu.register_dialect(ctx)
        with ctx:
            module = ir.Module.parse(body)
            return _read(module)
    except Exception:  # noqa: BLE001 - a figure for the estimate, never the verdict
        log.debug("cannot read a Mosaic kernel's windows", exc_info=True)
        return None


def _read(module: Any) -> Traffic | None:
    funcs = {_sym(op): op for op in module.body.operations if _sym(op)}
    main = next((op for op in funcs.values() if "window_params" in op.attributes), None)
    if main is None or "iteration_bounds" not in main.attributes:
        return None
    grid = tuple(int(x) for x in main.attributes["iteration_bounds"])
    prefetch = int(_int_attr(main.attributes, "scalar_prefetch"))
    block = main.regions[0].blocks[0]
    operands = [a.type for a in block.arguments][len(grid) + prefetch:]
    params = list(main.attributes["window_params"])
    n = math.prod(grid) if grid else 1
    if n > MAX_POINTS:
        return Traffic(grid, tuple(None for _ in params))
    idx = np.indices(grid, dtype=np.int64).reshape(len(grid), -1) if grid else np.zeros((0, 1), np.int64)
    windows = []
    for param, memref in zip(params, operands):
        windows.append(_window(param, memref, funcs, list(idx), prefetch))
    return Traffic(grid, tuple(windows))


def _window(param: Any, memref: Any, funcs: dict[str, Any], idx: list[np.ndarray], prefetch: int) -> Window | None:
    from jax._src.lib.mlir import ir

    d = ir.DictAttr(param)
    if "window_bounds" not in d or "transform_indices" not in d:
        return None
    bounds = [int(x) for x in d["window_bounds"]]
    fn = funcs.get(str(d["transform_indices"]).lstrip("@"))
    itemsize = _itemsize(str(memref))
    if fn is None or itemsize is None:
        return None
    blocks = _evaluate(fn, idx, prefetch)
    if blocks is None:
        return None
    nsteps = idx[0].shape[0] if idx else 1
    stacked = np.stack([np.broadcast_to(b, (nsteps,)) for b in blocks]) if blocks else np.zeros((0, nsteps), np.int64)
    changes = 1 + int(np.count_nonzero(np.any(stacked[:, 1:] != stacked[:, :-1], axis=0))) if nsteps > 1 else 1
    distinct = len({tuple(c) for c in stacked.T.tolist()}) if stacked.shape[0] else 1
    size = math.prod(bounds) * itemsize
    return Window(moved_bytes=int(changes * size), distinct_bytes=int(distinct * size))


def _itemsize(memref_type: str) -> float | None:
    m = re.match(r"memref<(?:[\d?]+x)*([a-zA-Z0-9]+)", memref_type)
    return _ITEMSIZE.get(m.group(1)) if m else None


_CMP = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal,
        6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}


def _evaluate(fn: Any, idx: list[np.ndarray], prefetch: int) -> list[np.ndarray] | None:
    """The index function's results at every grid point, or None if it does anything but integer arithmetic."""
    block = fn.regions[0].blocks[0]
    args = list(block.arguments)
    if prefetch and len(args) > len(idx):  # the scalar-prefetch refs: only an index map that ignores them is read
        used = {str(a.get_name()) for a in args[len(idx):]}
    else:
        used = set()
    values: dict[str, np.ndarray] = {a.get_name(): v for a, v in zip(args, idx)}
    for op in block.operations:
        name = op.operation.name.removeprefix("stable_mosaic.")
        ins = []
        for o in op.operands:
            key = o.get_name()
            if key in used or key not in values:
                return None
            ins.append(values[key])
        if name == "func.return":
            return ins
        out = _op(name, op, ins)
        if out is None:
            return None
        values[op.results[0].get_name()] = out
    return None


def _op(name: str, op: Any, ins: list[np.ndarray]) -> np.ndarray | None:
    a = ins[0] if ins else None
    b = ins[1] if len(ins) > 1 else None
    if name == "arith.constant":
        return np.asarray(int(_int_attr(op.attributes, "value")), np.int64)
    if name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci"):
        return np.asarray(a, np.int64)
    if b is None:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "arith.addi":
            return a + b
        if name == "arith.subi":
            return a - b
        if name == "arith.muli":
            return a * b
        if name in ("arith.divsi", "arith.divui"):
            return np.where(b == 0, 0, np.trunc(a / np.where(b == 0, 1, b))).astype(np.int64)
        if name == "arith.floordivsi":
            return np.floor_divide(a, np.where(b == 0, 1, b))
        if name == "arith.ceildivsi":
            return -np.floor_divide(-a, np.where(b == 0, 1, b))
        if name in ("arith.remsi", "arith.remui"):
            return np.fmod(a, np.where(b == 0, 1, b))
        if name in ("arith.maxsi", "arith.maxui"):
            return np.maximum(a, b)
        if name in ("arith.minsi", "arith.minui"):
            return np.minimum(a, b)
        if name == "arith.cmpi":
            return _CMP[int(_int_attr(op.attributes, "predicate"))](a, b).astype(np.int64)
        if name == "arith.select" and len(ins) == 3:
            return np.where(a != 0, b, ins[2])
        if name == "arith.andi":
            return a & b
        if name == "arith.ori":
            return a | b
        if name == "arith.xori":
            return a ^ b
        if name == "arith.shli":
            return np.left_shift(a, b)
        if name in ("arith.shrsi", "arith.shrui"):
            return np.right_shift(a, b)
    return None


def _sym(op: Any) -> str:
    try:
        return str(op.attributes["sym_name"]).strip('"')
    except (KeyError, ValueError):
        return ""


def _int_attr(attributes: Any, key: str) -> int:
    text = str(attributes[key])  # "8 : i64", "-1 : index", "true"
    m = re.match(r"\s*(-?\d+|true|false)", text)
    if m is None:
        raise ValueError(f"not an integer attribute: {key} = {text}")
    return {"true": 1, "false": 0}[m.group(1)] if m.group(1) in ("true", "false") else int(m.group(1))
