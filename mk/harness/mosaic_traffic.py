"""The HBM traffic of a Mosaic kernel's pipelined blocks, read from the exported program (trusted side).

A Pallas TPU kernel's ``tpu_custom_call`` carries its Mosaic module (``custom_call_config.body``, MLIR bytecode). Its
main function declares the grid (``iteration_bounds``) and, per operand, a window: the block shape
(``window_bounds``) and the function that maps grid indices to the block's index (``transform_indices``). The
pipeline copies an input block in when its index differs from the previous grid step's, and writes an output block
back when it changes, so over the grid (row-major, the last axis fastest) each window moves

    (number of index changes, the first step included) x block bytes.

XLA's cost analysis counts nothing for a custom call, so these bytes are the kernel's whole traffic (a matmul's row
block read once per column block included). The index functions are evaluated here over every grid point at once
(numpy, the ``arith`` integer operations with 32-bit wrap-around and unsigned variants). A window whose index
function does anything else, or a grid above :data:`MAX_POINTS` points, is counted at its upper bound (a block every
step). What cannot be bounded is named instead (:attr:`Traffic.unknown`): a window without blocks (``pl.ANY``: the
kernel's own DMAs), a grid or a loop in the kernel whose trip count is known only at run time (libtpu's static
schedule counts such a loop a fixed number of times), a module that cannot be read; the estimate then refuses.
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
    """One operand's blocks over the grid: bytes moved (index changes x block bytes); ``upper_bound``: its index
    function could not be evaluated, so a block every step was counted."""

    moved_bytes: int
    upper_bound: bool = False


@dataclass(frozen=True)
class Traffic:
    """A kernel's grid, each operand's window, and what could not be counted (each a reason)."""

    grid: tuple[int, ...]
    windows: tuple[Window, ...]
    unknown: tuple[str, ...] = ()

    @property
    def moved_bytes(self) -> int:
        return sum(w.moved_bytes for w in self.windows)


@dataclass(frozen=True)
class ProgramTraffic:
    """Every Mosaic kernel of an exported program: their blocks' bytes, and what could not be counted."""

    moved_bytes: int
    kernels: int
    unknown: tuple[str, ...] = ()


def body_of(backend_config: str) -> bytes | None:
    """The Mosaic module's bytecode in a ``tpu_custom_call``'s backend config (a line of an exported module's MLIR
    text, or of compiled HLO text where the compiler kept it)."""
    m = _BODY.search(backend_config)
    return base64.b64decode(m.group(1)) if m else None


def program_traffic(module_text: str) -> ProgramTraffic:
    """The traffic of every Mosaic kernel in an exported program's MLIR text."""
    moved, kernels, unknown = 0, 0, []
    for line in module_text.splitlines():
        if "tpu_custom_call" not in line or (body := body_of(line)) is None:
            continue
        kernels += 1
        t = traffic(body)
        moved += t.moved_bytes
        unknown += [f"kernel {kernels}: {why}" for why in t.unknown]
    return ProgramTraffic(moved, kernels, tuple(unknown))


def traffic(body: bytes) -> Traffic:
    """The traffic of the kernel in Mosaic bytecode ``body``."""
    try:
        from jax._src.lib.mlir import ir
        from jaxlib.mosaic.python import tpu

        ctx = ir.Context()
        ctx.allow_unregistered_dialects = True
        tpu.register_dialect(ctx)
        with ctx:
            module = ir.Module.parse(body)
            return _read(module)
    except Exception as exc:  # noqa: BLE001 - a figure for the estimate, never the verdict
        log.debug("cannot read a Mosaic kernel's windows", exc_info=True)
        return Traffic((), (), (f"its Mosaic module could not be read ({type(exc).__name__})",))


def _read(module: Any) -> Traffic:
    funcs = {_sym(op): op for op in module.body.operations if _sym(op)}
    main = next((op for op in funcs.values() if "window_params" in op.attributes), None)
    if main is None or "iteration_bounds" not in main.attributes:
        return Traffic((), (), ("no grid and windows in its Mosaic module",))
    grid = tuple(int(x) for x in main.attributes["iteration_bounds"])
    if any(g <= 0 or g >= 1 << 31 for g in grid):
        return Traffic(grid, (), ("its grid is sized at run time",))
    unknown = [f"a loop in the kernel ({what}) whose trip count is known only at run time"
               for what in _dynamic_loops(main)]
    prefetch = int(_int_attr(main.attributes, "scalar_prefetch"))
    block = main.regions[0].blocks[0]
    operands = [a.type for a in block.arguments][len(grid) + prefetch:]
    n = math.prod(grid) if grid else 1
    idx = list(np.indices(grid, dtype=np.int64).reshape(len(grid), -1)) if grid and n <= MAX_POINTS else None
    windows = []
    for k, (param, memref) in enumerate(zip(main.attributes["window_params"], operands)):
        w = _window(param, memref, funcs, idx, n)
        if w is None:
            unknown.append(f"operand {k} has no blocks (pl.ANY: the kernel's own DMAs)")
        else:
            windows.append(w)
    return Traffic(grid, tuple(windows), tuple(unknown))


def _dynamic_loops(op: Any) -> list[str]:
    """The loops in ``op``'s regions whose bounds are not constants (``scf.while``; ``scf.for`` over values)."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                name = child.operation.name.removeprefix("stable_mosaic.")
                if name == "scf.while" or (name == "scf.for" and not all(_constant(v) for v in list(child.operands)[:3])):
                    found.append(name)
                found += _dynamic_loops(child.operation)
    return found


def _constant(value: Any) -> bool:
    owner = value.owner
    name = getattr(getattr(owner, "operation", owner), "name", "")
    if name.removeprefix("stable_mosaic.") == "arith.constant":
        return True
    if name.removeprefix("stable_mosaic.") in ("arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci"):
        return _constant(owner.operation.operands[0])
    return False


def _window(param: Any, memref: Any, funcs: dict[str, Any], idx: list[np.ndarray] | None, steps: int) -> Window | None:
    """The window's traffic; None when it has no blocks (``pl.ANY``)."""
    from jax._src.lib.mlir import ir

    d = ir.DictAttr(param)
    if "window_bounds" not in d:
        return None
    bounds = [int(x) for x in d["window_bounds"]]
    itemsize = _itemsize(str(memref)) or 8  # a type it does not know: the widest
    size = math.prod(bounds) * itemsize
    fn = funcs.get(str(d["transform_indices"]).lstrip("@")) if "transform_indices" in d else None
    blocks = _evaluate(fn, idx) if fn is not None and idx is not None else None
    if blocks is None:
        return Window(moved_bytes=int(steps * size), upper_bound=True)
    stacked = np.stack([np.broadcast_to(b, (steps,)) for b in blocks]) if blocks else np.zeros((0, steps), np.int64)
    changes = 1 + int(np.count_nonzero(np.any(stacked[:, 1:] != stacked[:, :-1], axis=0))) if steps > 1 else 1
    return Window(moved_bytes=int(changes * size))


def _itemsize(memref_type: str) -> float | None:
    m = re.match(r"memref<(?:[\d?]+x)*([a-zA-Z0-9]+)", memref_type)
    return _ITEMSIZE.get(m.group(1)) if m else None


_SIGNED_CMP = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal}
_UNSIGNED_CMP = {6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}
_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}


def _evaluate(fn: Any, idx: list[np.ndarray]) -> list[np.ndarray] | None:
    """The index function's results at every grid point, or None if it does anything but integer arithmetic on the
    grid indices (a scalar-prefetch value read, a float, an op not modelled)."""
    block = fn.regions[0].blocks[0]
    args = list(block.arguments)
    values: dict[str, np.ndarray] = {a.get_name(): v for a, v in zip(args, idx)}  # prefetch refs stay unbound
    for op in block.operations:
        name = op.operation.name.removeprefix("stable_mosaic.")
        ins = []
        for o in op.operands:
            if o.get_name() not in values:
                return None
            ins.append(values[o.get_name()])
        if name == "func.return":
            return ins
        if len(op.results) != 1:
            return None
        bits = _BITS.get(str(op.results[0].type))
        in_bits = _BITS.get(str(op.operands[0].type)) if len(op.operands) else bits
        if bits is None or in_bits is None:
            return None
        out = _op(name, op, ins, in_bits)
        if out is None:
            return None
        values[op.results[0].get_name()] = _wrap(np.asarray(out, np.int64), bits)
    return None


def _wrap(v: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement ``bits``-wide, as the chip's integers are."""
    if bits >= 64:
        return v
    if bits == 1:
        return v & 1
    half = 1 << (bits - 1)
    return ((v + half) % (1 << bits)) - half


def _unsigned(v: np.ndarray, bits: int) -> np.ndarray:
    return v if bits >= 64 else v & ((1 << bits) - 1)


def _op(name: str, op: Any, ins: list[np.ndarray], bits: int) -> np.ndarray | None:
    if name == "arith.constant":
        return np.asarray(int(_int_attr(op.attributes, "value")), np.int64)
    a = ins[0] if ins else None
    if name in ("arith.index_cast", "arith.extsi", "arith.trunci"):
        return a
    if name in ("arith.index_castui", "arith.extui"):
        return _unsigned(a, bits)
    b = ins[1] if len(ins) > 1 else None
    if a is None or b is None:
        return None
    ua, ub = _unsigned(a, bits), _unsigned(b, bits)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        simple = {"arith.addi": lambda: a + b, "arith.subi": lambda: a - b, "arith.muli": lambda: a * b,
                  "arith.andi": lambda: a & b, "arith.ori": lambda: a | b, "arith.xori": lambda: a ^ b,
                  "arith.maxsi": lambda: np.maximum(a, b), "arith.minsi": lambda: np.minimum(a, b),
                  "arith.maxui": lambda: np.maximum(ua, ub), "arith.minui": lambda: np.minimum(ua, ub),
                  "arith.shli": lambda: np.where((ub >= 0) & (ub < bits), a << np.clip(ub, 0, 63), 0),
                  "arith.shrui": lambda: np.where(ub < bits, ua >> np.clip(ub, 0, 63), 0),
                  "arith.shrsi": lambda: a >> np.clip(ub, 0, bits - 1)}
        if name in simple:
            return simple[name]()
        if name in ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.floordivsi", "arith.ceildivsi"):
            x, y = (ua, ub) if name.endswith("ui") else (a, b)
            if np.any(y == 0):
                return None  # undefined on the chip: not modelled
            if name in ("arith.divsi", "arith.divui"):
                return np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))
            if name in ("arith.remsi", "arith.remui"):
                return np.sign(x) * (np.abs(x) % np.abs(y))
            return np.floor_divide(x, y) if name == "arith.floordivsi" else -np.floor_divide(-x, y)
        if name == "arith.cmpi":
            pred = int(_int_attr(op.attributes, "predicate"))
            if pred in _SIGNED_CMP:
                return _SIGNED_CMP[pred](a, b).astype(np.int64)
            return _UNSIGNED_CMP[pred](ua, ub).astype(np.int64) if pred in _UNSIGNED_CMP else None
        if name == "arith.select" and len(ins) == 3:
            return np.where(a != 0, b, ins[2])
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
