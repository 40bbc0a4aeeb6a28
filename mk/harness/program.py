"""Programs as data: what crosses the trust boundary and how each side reads it.

The tracer (untrusted side) traces a candidate once per scale to a closed
jaxpr and derives every program from that one trace: the program lowered for
the target (``jax.export``, Mosaic / Triton kernels inside as custom calls)
and a CPU-executable form in which every ``pallas_call`` runs in Pallas's HLO
interpreter (a scan over the grid, NaN-filled outputs, no host callbacks, so
it serialises). The jaxpr helpers here (:func:`pallas_eqns`,
:func:`with_interpret`, …) run there.

The judge (trusted side) never imports candidate code; it reads the exported
modules as MLIR: which custom calls they contain (:func:`custom_calls`), and
derives its own variants of the *target* program with kernels replaced by
constants (:func:`ablated`), which run on the CPU to show that every kernel
does the work and how much of the reference's work runs outside kernels.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

log = logging.getLogger(__name__)

#: custom-call targets that are the target's own kernels
def _kernel_calls(target: str) -> frozenset[str]:
    """The custom calls that are ``target``'s kernels (the target registry says)."""
    from mk.targets import get_target

    return get_target(target).kernel_calls


#: custom calls XLA itself emits for partitioning/placement; they compute nothing
BENIGN_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement",
                            "MoveToHost", "MoveToDevice", "X64Combine", "X64SplitLow", "X64SplitHigh"})
#: jaxpr primitives that run host Python during the computation
CALLBACK_PRIMITIVES = frozenset({"pure_callback", "io_callback", "debug_callback", "debug_print", "callback", "host_callback"})
#: dot precisions (``lax.Precision`` names and ``DotAlgorithmPreset`` names) that keep float32 accuracy on every
#: chip; anything else, no precision at all included, is lowered as one bf16 pass by Mosaic and as TF32 by Triton
_FULL_PRECISIONS = frozenset({"HIGHEST", "F32_F32_F32", "BF16_BF16_F32_X6", "TF32_TF32_F32_X3", "F64_F64_F64"})
#: element types, by their dtype names, whose products need a full-precision dot (complex64 is float32 pairs)
_WIDE_FLOATS = frozenset({"float32", "complex64", "float64", "complex128"})


def precision_names(precision: Any) -> list[str]:
    """The names of a ``dot_general`` precision parameter, one per operand (``None`` where none was given)."""
    if isinstance(precision, tuple):
        return [str(p).rsplit(".", 1)[-1] for p in precision]
    return [str(precision).rsplit(".", 1)[-1]]


def full_precision(precision: Any) -> bool:
    """Whether a dot with this precision parameter runs at float32 accuracy as lowered for a TPU and a GPU: only
    HIGHEST (or an f32-exact algorithm) on every operand; ``None`` and ``DEFAULT`` are one bf16 pass on Mosaic."""
    return precision is not None and all(n in _FULL_PRECISIONS for n in precision_names(precision))


# --- the tracer side: jaxpr walks ------------------------------------------------
def _sub_jaxprs(value: Any) -> Iterator[Any]:
    from jax.extend import core as jcore

    for v in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(v, jcore.ClosedJaxpr):
            yield v.jaxpr
        elif isinstance(v, jcore.Jaxpr):
            yield v


def walk(jaxpr: Any, *, into_kernels: bool = False) -> Iterator[Any]:
    """Every equation of ``jaxpr`` and its sub-jaxprs (``pjit``, ``cond``, ``scan``, custom_vjp, …);
    ``into_kernels`` also enters the kernel bodies of ``pallas_call``."""
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "pallas_call" and not into_kernels:
            continue
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                yield from walk(sub, into_kernels=into_kernels)


def pallas_eqns(jaxpr: Any) -> list[Any]:
    return [e for e in walk(jaxpr) if e.primitive.name == "pallas_call"]


def kernel_label(eqn: Any) -> str:
    """A readable name for a ``pallas_call``: its kernel's name and grid."""
    name = eqn.params.get("name") or ""
    meta = eqn.params.get("name_and_src_info")
    if not name and meta is not None:
        name = getattr(meta, "name", "") or str(meta).split(" ")[0]
    grid = getattr(eqn.params.get("grid_mapping"), "grid", None)
    return f"{name or 'kernel'}{'' if grid is None else ' grid=' + str(tuple(grid))}"


def with_interpret(closed: Any, interpret: Any, in_order: bool = False) -> Any:
    """``closed`` with every ``pallas_call`` (nested calls included) set to run with ``interpret``; the
    candidate's Python does not run again: this rewrites the one trace. ``in_order``: every grid axis declared
    "arbitrary" for this run, so the TPU interpreter visits the grid in order, as the HLO interpreter does."""
    from jax._src.pallas import core as pallas_core
    from jax.extend import core as jcore

    # the TPU interpreter runs on host callbacks (ordered IO effects): the rewritten pallas_call and every
    # equation and jaxpr around it must declare them, or lowering finds no token for them (KeyError)
    added = frozenset(pallas_core.get_interpret_effects(interpret))
    tpu_interpreter = bool(added)

    def rewrite(jaxpr: Any) -> Any:
        eqns = []
        grew = False
        for eqn in jaxpr.eqns:
            params = dict(eqn.params)
            if eqn.primitive.name == "pallas_call":
                params["interpret"] = interpret
                if tpu_interpreter:
                    params["compiler_params"] = _with_vmapped_semantics(params.get("compiler_params"), params.get("grid_mapping"))
                    if in_order:
                        params["compiler_params"] = _in_order(params["compiler_params"])
                inner = added
            else:
                before = [sub.effects for value in params.values() for sub in _sub_jaxprs(value)]
                for key, value in params.items():
                    params[key] = _map_jaxprs(value, rewrite, jcore)
                after = [sub.effects for value in params.values() for sub in _sub_jaxprs(value)]
                inner = frozenset().union(*after) - frozenset().union(*before)
            grew = grew or bool(inner - eqn.effects)
            eqns.append(eqn.replace(params=params, effects=eqn.effects | inner))
        if not grew:
            return jaxpr.replace(eqns=eqns)
        return jaxpr.replace(eqns=eqns, effects=jaxpr.effects | frozenset().union(*(e.effects for e in eqns)))

    return jcore.ClosedJaxpr(rewrite(closed.jaxpr), closed.consts)


def parallel_axes(jaxpr: Any) -> list[tuple[int, ...]]:
    """For each kernel, the sizes of the grid axes it declares ``"parallel"``: the leading axes the TPU interpreter
    visits in a shuffled order (a chip with two TensorCores splits them between the cores), 0 for a dynamic size."""
    from jax._src.pallas.mosaic import core as mosaic_core

    found = []
    for eqn in pallas_eqns(jaxpr):
        grid_mapping = eqn.params.get("grid_mapping")
        params = _with_vmapped_semantics(eqn.params.get("compiler_params"), grid_mapping)
        semantics = getattr(params, "dimension_semantics", None) or ()
        sizes = []
        for size, meaning in zip(tuple(getattr(grid_mapping, "grid", ()) or ()), semantics):
            if meaning not in ("parallel", mosaic_core.PARALLEL):
                break
            sizes.append(size if isinstance(size, int) else 0)
        found.append(tuple(sizes))
    return found


#: the largest parallel axis whose order :func:`shuffling_seed` draws (the judge's process does the search: its work
#: must not grow with a size the tracer reports)
SHUFFLE_DRAWN = 1024
#: at most this many kernels and axes per kernel are read from the ``parallel_axes`` fact
_AXES_READ = (64, 8)


def shuffling_seed(axes: Sequence[tuple[int, ...]], tries: int = 512) -> tuple[int, int]:
    """A seed for the TPU interpreter's ``random_seed`` under which as many ``"parallel"`` axes (of size >= 2) as
    possible are visited neither first at index 0 nor last at their last index, so that a kernel that carries state
    along such an axis (an accumulator initialised at index 0 and stored at the last) computes a wrong result there:
    ``(seed, axes shuffled so)``. It follows the interpreter's draw (one key per kernel from the seed, split once per
    parallel axis, ``jax.random.permutation``); tests/test_parallel_axes.py checks the visiting order it records."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    seeds = np.arange(1, tries + 1)
    moved = np.zeros(tries, dtype=np.int64)
    for sizes in axes:
        if not any(n >= 2 for n in sizes):
            continue

        def draw(seed: Any, sizes: tuple[int, ...] = sizes) -> list[Any]:
            key, perms = jax.random.key(seed), []
            for n in sizes:
                key, sub = jax.random.split(key)  # the interpreter's key chain, whatever the axis' size
                perms.append(jax.random.permutation(sub, jnp.arange(max(min(n, SHUFFLE_DRAWN), 1), dtype=jnp.int32)))
            return perms

        for n, perm in zip(sizes, jax.vmap(draw)(seeds)):
            if n > SHUFFLE_DRAWN:  # moved under almost any seed (a chance of 2/n not to be): not drawn here
                moved += 1
            elif n >= 2:
                perm = np.asarray(perm)
                moved += (perm[:, 0] != 0) & (perm[:, -1] != n - 1)
    best = int(np.argmax(moved))  # the first seed that moves the most axes
    return int(seeds[best]), int(moved[best])


@functools.lru_cache(maxsize=512)
def _seed_for(axes: tuple[tuple[int, ...], ...]) -> int:
    return shuffling_seed(axes)[0]


def check_seed(axes: Sequence[Sequence[int]]) -> int:
    """The TPU interpreter's ``random_seed`` for the check runs of a program whose kernels declare ``axes`` (the
    ``parallel_axes`` fact): :func:`shuffling_seed`, chosen by the judge's own process and remembered per axes (the
    search costs about a second of JAX's eager dispatch, and the same grids come back candidate after candidate)."""
    kernels, per_kernel = _AXES_READ
    read = []
    for sizes in list(axes or [])[:kernels]:  # a fact from the tracer: bounded and made of non-negative ints
        if isinstance(sizes, (list, tuple)):
            read.append(tuple(max(0, int(n)) if isinstance(n, int) and not isinstance(n, bool) else 0
                              for n in list(sizes)[:per_kernel]))
    return _seed_for(tuple(read))


def _in_order(compiler_params: Any) -> Any:
    """TPU compiler params with every grid axis "arbitrary" (visited in order); others as they are."""
    semantics = getattr(compiler_params, "dimension_semantics", None)
    if not semantics:
        return compiler_params
    return dataclasses.replace(compiler_params, dimension_semantics=("arbitrary",) * len(semantics))


def _with_vmapped_semantics(compiler_params: Any, grid_mapping: Any) -> Any:
    """TPU compiler params whose ``dimension_semantics`` cover a vmapped grid: ``jax.vmap`` of a pallas_call
    adds grid dimensions (``grid_mapping.vmapped_dims``) but keeps the user's semantics; Mosaic's lowering
    inserts "parallel" for them, the TPU interpreter zips grid and semantics and fails (safe_zip)."""
    semantics = getattr(compiler_params, "dimension_semantics", None)
    vmapped = tuple(getattr(grid_mapping, "vmapped_dims", ()) or ())
    grid = tuple(getattr(grid_mapping, "grid", ()) or ())
    if semantics is None or not vmapped or len(semantics) + len(vmapped) != len(grid):
        return compiler_params
    user = iter(semantics)
    full = tuple("parallel" if i in vmapped else next(user) for i in range(len(grid)))
    return dataclasses.replace(compiler_params, dimension_semantics=full)


def _map_jaxprs(value: Any, fn: Callable[[Any], Any], jcore: Any) -> Any:
    if isinstance(value, jcore.ClosedJaxpr):
        return jcore.ClosedJaxpr(fn(value.jaxpr), value.consts)
    if isinstance(value, jcore.Jaxpr):
        return fn(value)
    if isinstance(value, tuple) and value and all(isinstance(v, (jcore.ClosedJaxpr, jcore.Jaxpr)) for v in value):
        return tuple(_map_jaxprs(v, fn, jcore) for v in value)
    return value


def candidate_interpret(jaxpr: Any) -> list[str]:
    """Kernels the candidate itself set to interpret mode (they would never run as kernels on the device)."""
    return [kernel_label(e) for e in pallas_eqns(jaxpr) if e.params.get("interpret")]


def callbacks(jaxpr: Any) -> list[str]:
    """Host callbacks anywhere in the program, kernel bodies included."""
    return sorted({e.primitive.name for e in walk(jaxpr, into_kernels=True) if e.primitive.name in CALLBACK_PRIMITIVES
                   or "callback" in e.primitive.name})


def low_precision_kernel_dots(jaxpr: Any) -> list[str]:
    """In-kernel ``dot_general`` on float32 (or complex64) operands at a precision below HIGHEST, none given
    included: Mosaic lowers ``precision=None`` as one bf16 pass, Triton as TF32."""
    found = []
    for eqn in pallas_eqns(jaxpr):
        body = eqn.params["jaxpr"]
        for inner in walk(body, into_kernels=True):
            if inner.primitive.name != "dot_general":
                continue
            dtypes = {str(getattr(v.aval, "dtype", "")) for v in inner.invars}
            precision = inner.params.get("precision")
            if dtypes & _WIDE_FLOATS and not full_precision(precision):
                found.append(f"{kernel_label(eqn)}: dot_general precision={'/'.join(precision_names(precision))}")
    return found


def async_kernels(jaxpr: Any) -> list[str]:
    """Kernels that start DMAs or use semaphores: their ordering is only checked by the TPU interpreter's
    race detector (the HLO interpreter runs every copy at once)."""
    found = []
    for eqn in pallas_eqns(jaxpr):
        names = {e.primitive.name for e in walk(eqn.params["jaxpr"], into_kernels=True)}
        if any("dma" in n or "semaphore" in n for n in names):
            found.append(kernel_label(eqn))
    return found


def dma_write_races(jaxpr: Any) -> list[str]:
    """Two DMAs in flight into the same destination (same buffer, same static window), the first not yet waited
    for: which lands last is up to the hardware. JAX's race detector does not report this write/write race. Only
    windows that are provably the same are compared (a dynamic index, as in double buffering, is never flagged);
    each block of the kernel body is checked in program order."""
    try:
        from jax._src.pallas.mosaic.primitives import _dma_unflatten
    except ImportError:  # another JAX: the check is an addition, never a gate
        return []
    from jax.extend import core as jcore

    def key(tref: Any) -> tuple | None:
        ref, transforms = getattr(tref, "ref", tref), getattr(tref, "transforms", ())
        leaves = jax_leaves(transforms)
        if any(isinstance(x, jcore.Var) for x in leaves):
            return None
        return (id(ref), repr([getattr(x, "val", x) for x in leaves]), repr(transforms).split("(")[0])

    found: list[str] = []

    def block(jaxpr: Any, label: str) -> None:
        in_flight: dict[tuple, tuple | None] = {}
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in ("dma_start", "dma_wait"):
                try:
                    _src, dst, dst_sem, _src_sem, _dev = _dma_unflatten(eqn.params["tree"], eqn.invars)
                except Exception:  # noqa: BLE001 - an unknown layout: say nothing
                    continue
                d, sem = key(dst), key(dst_sem)
                if name == "dma_start" and d is not None:
                    if d in in_flight:
                        found.append(f"{label}: a second DMA into the same buffer starts before the first is waited for")
                    in_flight[d] = sem
                elif name == "dma_wait":
                    for k in [k for k, v in in_flight.items() if v == sem or k == d]:
                        del in_flight[k]
            for value in eqn.params.values():
                for sub in _sub_jaxprs(value):
                    block(sub, label)

    for eqn in pallas_eqns(jaxpr):
        block(eqn.params["jaxpr"], kernel_label(eqn))
    return found


def jax_leaves(tree: Any) -> list[Any]:
    import jax

    return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: x is None)


# --- the judge side: exported modules as MLIR ---------------------------------------
@dataclass(frozen=True)
class CallSite:
    """One ``stablehlo.custom_call`` in an exported module, in module order."""

    target: str
    name: str
    results: tuple[str, ...]


def custom_calls(module_text: str) -> list[CallSite]:
    """Every custom call in an exported module's MLIR text, nested functions included."""
    ctx, module = _parse(module_text)  # the context must outlive every op read from the module
    with ctx:
        return [CallSite(*_site(op)) for op in _custom_call_ops(module)]


def kernel_calls(sites: Sequence[CallSite], target: str) -> list[CallSite]:
    return [s for s in sites if s.target in _kernel_calls(target)]


def foreign_calls(sites: Sequence[CallSite], target: str) -> list[CallSite]:
    """Custom calls that are neither the target's kernels nor XLA's own placement markers (host callbacks
    and any other opaque code)."""
    return [s for s in sites if s.target not in _kernel_calls(target) and s.target not in BENIGN_TARGETS]


def low_precision_xla_dots(module_text: str) -> int:
    """Dots and convolutions on float32 (complex64 included) operands that XLA runs below HIGHEST precision (no ``precision`` or
    not all ``HIGHEST``: one bf16 pass on a TPU, TF32 on a recent GPU; the CPU ignores it). Kernel bodies are
    opaque custom calls, so every one found here runs outside kernels."""
    from jax._src.lib.mlir import ir

    ctx, module = _parse(module_text)
    found = 0
    with ctx:
        def visit(op: Any) -> None:
            nonlocal found
            for region in op.regions:
                for block in region.blocks:
                    for child in block.operations:
                        name = child.operation.name
                        if name in ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"):
                            types = {str(ir.RankedTensorType(v.type).element_type) for v in child.operands[:2]}
                            precision = str(child.attributes["precision_config"]) if "precision_config" in child.attributes else ""
                            if any("f32" in t or "f64" in t for t in types) and (not precision or precision.count("HIGHEST") < 2):
                                found += 1
                        visit(child.operation)

        visit(module.operation)
    return found


def ablated(exported: Any, fills: Sequence[float | str | None], *, keep_operands: bool = False) -> Any:
    """A CPU-runnable ``Exported`` from ``exported`` (the target program) in which the i-th kernel custom call
    is replaced by a constant ``fills[i]`` (NaN for floats where ``fills[i]`` is None; integers get the
    dtype's minimum, booleans False; ``"iota"``: 0, 1, 2 … along the last axis). Every kernel must be
    replaced, since the CPU cannot run them.

    ``keep_operands``: the replacement still reads every operand of the kernel (a multiply by zero and a
    sum, added to a NaN fill), so whatever XLA computes to feed a kernel stays in the program: the variant
    then measures the work that runs outside kernels (the added ops are tagged and :func:`work` skips them,
    in loops too)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    ctx, module = _parse(exported.mlir_module())
    with ctx, ir.Location.unknown():
        ops = [op for op in _custom_call_ops(module) if _site(op)[0] not in BENIGN_TARGETS]
        if len(ops) != len(fills):
            raise ValueError(f"{len(ops)} custom calls in the program, {len(fills)} fills given")
        for op, fill in zip(ops, fills):
            with ir.InsertionPoint(op):
                sink = _operand_sink(ir, hlo, list(op.operands)) if keep_operands else None
                for result in op.results:
                    rtype = ir.RankedTensorType(result.type)
                    if fill == "iota":  # 0, 1, 2 … along the last axis: not constant, so argmax / compares see it
                        axis = max(0, len(rtype.shape) - 1)
                        ity = ir.RankedTensorType.get(rtype.shape, ir.IntegerType.get_signless(32))
                        value = hlo.ConvertOp(rtype, hlo.IotaOp(ity, ir.IntegerAttr.get(ir.IntegerType.get_signless(64), axis)).result).result
                    else:
                        value = hlo.ConstantOp(_splat(ir, rtype, fill)).result
                    if sink is not None and _is_float(ir, rtype.element_type):
                        scalar = hlo.ConvertOp(ir.RankedTensorType.get([], rtype.element_type), sink).result
                        add = hlo.AddOp(value, hlo.BroadcastInDimOp(rtype, scalar, ir.DenseI64ArrayAttr.get([])).result)
                        _mark_sink(ir, add)
                        value = add.result
                    result.replace_all_uses_with(value)
            op.operation.erase()
        for op in _custom_call_ops(module):  # placement markers are identities on one CPU device
            if _site(op)[0] in BENIGN_TARGETS and len(op.operands) == len(op.results):
                for src, result in zip(op.operands, op.results):
                    result.replace_all_uses_with(src)
                op.operation.erase()
        data = mlir.module_to_bytecode(module)
    return dataclasses.replace(exported, mlir_module_serialized=data, platforms=("cpu",))


def _is_float(ir: Any, et: Any) -> bool:
    return not (isinstance(et, ir.IntegerType) or "IntegerType" in type(et).__name__ or "Index" in type(et).__name__)


def _operand_sink(ir: Any, hlo: Any, operands: list[Any]) -> Any:
    """``sum(x * 0)`` over every floating operand, as one f32 scalar (0, or NaN when an operand is NaN)."""
    f32 = ir.F32Type.get()
    scalar_t = ir.RankedTensorType.get([], f32)
    total = None
    for v in operands:
        t = ir.RankedTensorType(v.type)
        if not _is_float(ir, t.element_type):
            continue
        x = hlo.ConvertOp(ir.RankedTensorType.get(t.shape, f32), v).result if str(t.element_type) != "f32" else v
        zero = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get(t.shape, f32), ir.FloatAttr.get(f32, 0.0))).result
        mul = hlo.MulOp(x, zero)
        _mark_sink(ir, mul)
        init = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(scalar_t, ir.FloatAttr.get(f32, 0.0))).result
        red = hlo.ReduceOp([scalar_t], [mul.result], [init], ir.DenseI64ArrayAttr.get(list(range(len(t.shape)))))
        _mark_sink(ir, red)
        block = red.regions[0].blocks.append(scalar_t, scalar_t)
        with ir.InsertionPoint(block):
            hlo.ReturnOp([hlo.AddOp(block.arguments[0], block.arguments[1]).result])
        if total is None:
            total = red.result
        else:
            add = hlo.AddOp(total, red.result)
            _mark_sink(ir, add)
            total = add.result
    return total


_SINK = "mk.sink"


def _mark_sink(ir: Any, op: Any) -> None:
    """Tag an op the judge added to keep kernel operands alive: :func:`work` does not count it."""
    op.operation.attributes[_SINK] = ir.UnitAttr.get()


def _splat(ir: Any, rtype: Any, fill: float | None) -> Any:
    et = rtype.element_type
    if isinstance(et, ir.IntegerType) or "IntegerType" in type(et).__name__:
        ity = ir.IntegerType(et)
        width = ity.width
        if width == 1:
            value = ir.IntegerAttr.get(et, 0 if fill is None else int(bool(fill)))
        else:
            low = -(2 ** (width - 1)) if not ity.is_unsigned else 0
            value = ir.IntegerAttr.get(et, low if fill is None else int(fill))
    else:
        value = ir.FloatAttr.get(et, float("nan") if fill is None else float(fill))
    return ir.DenseElementsAttr.get_splat(rtype, value)


#: grid points an output index map is evaluated at to find two that share a block (the whole grid up to this many,
#: else this many drawn from it, corners and axis neighbours included)
GRID_POINTS = 1 << 14
#: primitives that update memory atomically: two programs adding into one block with them do not race
_ATOMICS = ("atomic_rmw", "atomic_cas")


def shared_output_blocks(jaxpr: Any) -> list[str]:
    """Triton kernels in which two grid points write the same output block: each output index map is evaluated
    over the grid (not read for which axes it names, so ``(i + 0 * k, j)`` and ``(i, j + k // 2)`` are caught). On
    a GPU those programs run at once, so accumulating into the block races; the interpreter runs the grid in order
    and hides it. (On a TPU the same pattern is the sequential accumulator.) A kernel that updates its outputs
    with atomics (``plgpu.atomic_add``) does not race and is not flagged."""
    found = []
    for eqn in pallas_eqns(jaxpr):
        params = eqn.params.get("compiler_params")
        if params is not None and "triton" not in type(params).__module__.lower() and "Triton" not in type(params).__name__:
            continue  # Mosaic GPU and others: not Triton's one-program-per-grid-point model
        if any(e.primitive.name in _ATOMICS for e in walk(eqn.params["jaxpr"], into_kernels=True)):
            continue
        gm = eqn.params.get("grid_mapping")
        grid = tuple(getattr(gm, "grid", ()) or ())
        if not grid or not all(isinstance(n, int) for n in grid):
            continue
        for bm in getattr(gm, "block_mappings_output", ()) or ():
            index_map = getattr(bm, "index_map_jaxpr", None)
            if index_map is None:
                continue
            shared = _shared_block(index_map, grid)
            if shared is not None:
                a, b, block = shared
                axes = [k for k, (u, v) in enumerate(zip(a, b)) if u != v]
                found.append(f"{kernel_label(eqn)}: an output block is written by more than one step of grid axis "
                             f"{axes[0]} (grid points {a} and {b} both write block {block})")
    return found


def _shared_block(index_map: Any, grid: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """Two grid points whose output block (the index map's value) is the same, with that block; None if none is
    found. The map is evaluated, vectorised, at every grid point (or :data:`GRID_POINTS` of them: the origin, each
    axis's first two and last steps, and random points with their neighbour along each axis)."""
    import itertools

    import jax
    import numpy as np

    closed = index_map
    nargs = len(closed.jaxpr.invars)
    if nargs < len(grid) or any(getattr(v.aval, "shape", ()) != () for v in closed.jaxpr.invars[:len(grid)]):
        return None
    total = math.prod(grid)
    if total < 2:
        return None
    if total <= GRID_POINTS:
        points = np.array(list(itertools.product(*(range(n) for n in grid))), np.int32)
    else:
        rng = np.random.default_rng(0)
        base = [tuple(0 for _ in grid)]
        for a, n in enumerate(grid):
            for step in (1, n - 1):
                p = [0] * len(grid)
                p[a] = min(step, n - 1)
                base.append(tuple(p))
        picks = rng.integers(0, np.array(grid), size=(GRID_POINTS // (len(grid) + 1), len(grid)))
        near = [picks]
        for a, n in enumerate(grid):
            moved = picks.copy()
            moved[:, a] = np.minimum(moved[:, a] + 1, n - 1)
            near.append(moved)
        points = np.unique(np.concatenate([np.array(base, np.int64)] + near).astype(np.int32), axis=0)
    extra = [jax.numpy.zeros(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars[len(grid):]]  # prefetch refs

    def one(*ids: Any) -> Any:
        return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *ids, *extra)

    try:
        with jax.default_device(jax.devices("cpu")[0]):
            blocks = jax.jit(jax.vmap(one))(*[points[:, a] for a in range(len(grid))])
    except Exception as exc:  # a map the judge cannot evaluate alone (it reads a prefetched ref): no claim either way
        log.info("output index map not evaluated over the grid: %s", exc)
        return None
    table = np.stack([np.asarray(b).reshape(len(points)) for b in blocks], axis=1) if blocks else np.zeros((len(points), 0))
    seen: dict[tuple[int, ...], int] = {}
    for row, block in enumerate(map(tuple, table.tolist())):
        if block in seen:
            return tuple(points[seen[block]].tolist()), tuple(points[row].tolist()), block
        seen[block] = row
    return None


def platform_dependent(jaxpr: Any) -> bool:
    """``lax.platform_dependent`` (a ``platform_index``): the code is chosen when lowering, so the CPU form would
    not be the device program."""
    return any(e.primitive.name == "platform_index" for e in walk(jaxpr, into_kernels=True))


def _parse(text: str | bytes) -> tuple[Any, Any]:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    ctx = mlir.make_ir_context()
    with ctx:
        return ctx, ir.Module.parse(text)


def _custom_call_ops(module: Any) -> list[Any]:
    found: list[Any] = []

    def visit(op: Any) -> None:
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    if child.operation.name == "stablehlo.custom_call":
                        found.append(child)
                    visit(child.operation)

    visit(module.operation)
    return found


def kernel_feeds(exported: Any) -> list[frozenset[int]]:
    """For each kernel custom call of ``exported`` (in the order :func:`ablated` replaces them), the kernels whose
    operands its results reach, through any ops, nested regions (a value reaching an op inside a loop or branch
    reaches that op's results) and calls into private functions. An over-approximation: a kernel counted as
    feeding another may not be read by it; the ablation uses it only to keep a kernel whose results feed a kernel
    that does work (a multi-kernel pipeline), and the share of work outside kernels is measured regardless."""
    ctx, module = _parse(exported.mlir_module())
    with ctx:
        kernels = [op.operation for op in _custom_call_ops(module) if _site(op)[0] not in BENIGN_TARGETS]
        funcs: dict[str, Any] = {}
        calls: dict[str, list[Any]] = {}

        def index(op: Any) -> None:
            for region in op.regions:
                for block in region.blocks:
                    for child in block.operations:
                        o = child.operation
                        if o.name == "func.func":
                            funcs[_attr_text(o, "sym_name")] = o
                        elif o.name == "func.call":
                            calls.setdefault(_attr_text(o, "callee").lstrip("@"), []).append(o)
                        index(o)

        index(module.operation)

        def which(op: Any) -> int | None:
            for i, k in enumerate(kernels):
                if k == op:
                    return i
            return None

        out: list[frozenset[int]] = []
        for start in kernels:
            fed: set[int] = set()
            seen: list[Any] = []
            stack = [list(start.results)]
            steps = 0
            while stack and steps < 200_000:
                values = stack.pop()
                for value in values:
                    for use in value.uses:
                        steps += 1
                        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                        j = which(owner)
                        if j is not None:
                            fed.add(j)
                            continue
                        if any(owner == s for s in seen):
                            continue
                        seen.append(owner)
                        stack.append(list(owner.results))
                        if owner.name == "func.call":
                            callee = funcs.get(_attr_text(owner, "callee").lstrip("@"))
                            if callee is not None:
                                stack.append(list(callee.regions[0].blocks[0].arguments))
                        if owner.name == "func.return":
                            fn = owner.parent
                            while fn is not None and fn.name != "func.func":
                                fn = fn.parent
                            if fn is not None:
                                for call in calls.get(_attr_text(fn, "sym_name"), []):
                                    stack.append(list(call.results))
                        parent = owner.parent
                        while parent is not None and parent.name not in ("func.func", "builtin.module"):
                            stack.append(list(parent.results))
                            parent = parent.parent
            out.append(frozenset(fed - {len(out)}))  # a kernel feeding itself (in a loop) is no evidence
        return out


def _attr_text(op: Any, name: str) -> str:
    from jax._src.lib.mlir import ir

    attr = op.attributes[name]
    for kind in (ir.StringAttr, ir.FlatSymbolRefAttr):
        try:
            return kind(attr).value
        except (TypeError, ValueError):
            continue
    return str(attr).strip('"')


def _site(op: Any) -> tuple[str, str, tuple[str, ...]]:
    from jax._src.lib.mlir import ir

    attrs = op.attributes
    target = ir.StringAttr(attrs["call_target_name"]).value
    name = ""
    for key in ("kernel_name", "name"):
        if key in attrs:
            try:
                name = ir.StringAttr(attrs[key]).value
            except (TypeError, ValueError):
                name = str(attrs[key])
            break
    return target, name, tuple(str(r.type) for r in op.results)


# --- FLOPs as the program states them (loops multiplied by their trip counts) ---------------
#: ops that only move or reinterpret data: everything else counts one operation per result element
_MOVEMENT = frozenset({
    "constant", "iota", "convert", "bitcast_convert", "reshape", "dynamic_reshape", "broadcast_in_dim", "broadcast",
    "dynamic_broadcast_in_dim", "transpose", "slice", "dynamic_slice", "dynamic_update_slice", "concatenate", "pad",
    "dynamic_pad", "reverse", "gather", "dynamic_gather", "copy", "get_tuple_element", "tuple", "optimization_barrier",
    "return", "custom_call", "get_dimension_size", "set_dimension_size", "real_dynamic_slice", "create_token",
    "after_all", "partition_id", "replica_id", "reduce_precision"})


@dataclass
class Work:
    """What :func:`flops` counted: operations, plus loops whose trip count it could not read (counted once)."""

    flops: float = 0.0
    unknown_loops: float = 0.0  # operations inside loops counted once because their trip count is unknown


def flops(exported: Any) -> float:
    return work(exported).flops


def work(exported: Any) -> Work:
    """Operations of ``exported``'s main function, counted from its StableHLO: a dot or a convolution as 2·MACs,
    any other computing op as one per result element (integer arithmetic included; pure data movement not), a
    reduction or a scatter as its combiner times the elements it combines, a ``while`` loop's body times its trip
    count where the loop counts (``i < n``, ``i != n``, ``i > n`` … from a constant start by a constant step, the
    compare being what the condition returns; otherwise once per element of the largest value it carries, and
    reported in :attr:`Work.unknown_loops`), a conditional as its most expensive branch,
    calls and composites followed into their functions. XLA's own cost analysis counts a loop body once, which
    lets work hide in a ``fori_loop``."""
    from jax._src.lib.mlir import ir

    ctx, module = _parse(exported.mlir_module())
    out = Work()
    with ctx:
        funcs = {}
        for op in module.body.operations:
            if op.operation.name == "func.func":
                funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
        memo: dict[str, float] = {}

        def func_cost(name: str) -> float:
            if name not in memo:
                memo[name] = 0.0  # recursion guard
                memo[name] = region_cost(funcs[name].regions[0]) if name in funcs else 0.0
            return memo[name]

        def region_cost(region: Any) -> float:
            return sum(op_cost(op) for block in region.blocks for op in block.operations)

        def op_cost(op: Any) -> float:
            name = op.operation.name
            short = name.split(".", 1)[-1]
            if _SINK in op.operation.attributes:
                return 0.0
            if name == "func.call":
                return func_cost(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            if short == "composite":
                return func_cost(ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value)
            if short == "while":
                body = region_cost(op.regions[0]) + region_cost(op.regions[1])
                trips = _trip_count(ir, op)
                if trips is None:
                    # an unreadable trip count is taken as one trip per element of the largest value the loop
                    # carries (a loop over rows, or over elements, of what it updates); counted once it would hide
                    # a whole computation done a row per trip
                    bound = max((_size(ir, v.type) for v in op.operands if _ranked(ir, v.type)), default=1)
                    out.unknown_loops += max(1, bound) * body
                    return max(1, bound) * body
                return trips * body
            if short in ("case", "if"):
                return max((region_cost(r) for r in op.regions), default=0.0)
            if short == "dot_general":
                lhs = ir.RankedTensorType(op.operands[0].type)
                k = 1
                for d in _dims(str(op.attributes["dot_dimension_numbers"]), "lhs_contracting_dimensions"):
                    k *= lhs.shape[d]
                return 2.0 * _size(ir, op.results[0].type) * k * _complex_factor(lhs)
            if short == "dot":
                lhs = ir.RankedTensorType(op.operands[0].type)
                return 2.0 * _size(ir, op.results[0].type) * (lhs.shape[-1] if lhs.shape else 1) * _complex_factor(lhs)
            if short == "convolution":
                return 2.0 * _size(ir, op.results[0].type) * _conv_macs_per_output(ir, op)
            if short in ("reduce", "reduce_window", "select_and_scatter"):
                n = sum(_size(ir, v.type) for v in op.operands[: max(1, len(op.operands) // 2)])
                return n * max(1.0, sum(region_cost(r) for r in op.regions) / max(1, len(op.results)))
            if short == "scatter":
                n = _size(ir, op.operands[-1].type)  # the updates
                return n * max(1.0, sum(region_cost(r) for r in op.regions))
            if short == "sort":
                n = _size(ir, op.operands[0].type)
                return n * max(1.0, math.log2(max(n, 2))) * max(1.0, sum(region_cost(r) for r in op.regions))
            if short in _MOVEMENT or not op.results:
                return sum(region_cost(r) for r in op.regions)
            return float(sum(_size(ir, r.type) for r in op.results if _ranked(ir, r.type))) + sum(region_cost(r) for r in op.regions)

        out.flops = func_cost("main")
        return out


def _complex_factor(t: Any) -> float:
    """Real multiply-adds per element product: a complex product is four real ones."""
    return 4.0 if str(t.element_type).startswith("complex") else 1.0


@dataclass(frozen=True)
class CodePaths:
    """The shape of a program with its sizes taken out: its operations in order (constants aside) and, for each
    ``while`` loop in that order, its trip count (None where it cannot be read). Two sizes whose programs have the
    same ``ops`` run the same code (the same trace-time branches, block plans and padding); ``trips`` says which
    loops (the interpreter's grids, a kernel's own loops) ran more than once."""

    ops: str  # sha256 of the operation names
    trips: tuple[int | None, ...]


def code_paths(exported: Any) -> CodePaths:
    """:class:`CodePaths` of an exported program (the judge reads the CPU form, whose kernels are inlined as HLO)."""
    import hashlib

    from jax._src.lib.mlir import ir

    ctx, module = _parse(exported.mlir_module())
    names: list[str] = []
    trips: list[int | None] = []
    with ctx:
        def visit(op: Any) -> None:
            for region in op.regions:
                for block in region.blocks:
                    for child in block.operations:
                        name = child.operation.name
                        if name != "stablehlo.constant":
                            names.append(name)
                        if name == "stablehlo.while":
                            trips.append(_trip_count(ir, child))
                        visit(child.operation)

        visit(module.operation)
    return CodePaths(hashlib.sha256("\n".join(names).encode()).hexdigest(), tuple(trips))


def paths_covered(at: CodePaths, judged: Sequence[CodePaths]) -> str | None:
    """Why the code of ``at`` (a size the cases did not run) is not covered by the ``judged`` sizes' (None when it
    is): some judged size must run the same operations, and every loop that runs more than once at ``at`` must have
    run more than once at one of them (a loop of unknown trip count there, unknown at one of them too)."""
    same = [j for j in judged if j.ops == at.ops and len(j.trips) == len(at.trips)]
    if not same:
        return "its program runs other operations than at any judged size (another block plan or trace-time branch)"
    for k, n in enumerate(at.trips):
        ran = [j.trips[k] for j in same]
        if (n is None or n > 1) and not any(t is not None and t > 1 for t in ran) and not (n is None and None in ran):
            return f"loop {k + 1} runs {n if n is not None else 'an unknown number of'} times there and once at every judged size"
    return None


def _ranked(ir: Any, t: Any) -> bool:
    try:
        ir.RankedTensorType(t)
        return True
    except (TypeError, ValueError):
        return False


def _size(ir: Any, t: Any) -> int:
    n = 1
    for d in ir.RankedTensorType(t).shape:
        n *= d
    return n


def _dims(text: str, key: str) -> list[int]:
    import re

    m = re.search(key + r"\s*=\s*\[([^\]]*)\]", text)
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []


def _conv_macs_per_output(ir: Any, op: Any) -> float:
    """Multiply-adds per output element: the kernel's size over its output-feature dimension."""
    import re

    kernel = ir.RankedTensorType(op.operands[1].type)
    size = float(_size(ir, op.operands[1].type))
    spec = re.search(r"x\[([^\]]*)\]", str(op.attributes["dimension_numbers"]))
    if spec:
        dims = [d.strip() for d in spec.group(1).split(",")]
        if "o" in dims and len(dims) == len(kernel.shape):
            return size / max(1, kernel.shape[dims.index("o")])
    return size / max(1, max(kernel.shape) if kernel.shape else 1)


def _trip_count(ir: Any, op: Any) -> int | None:
    """Trips of a counted loop: the condition compares a carried value with a constant, the value starts at a
    constant and the body adds a constant to it. None when the loop is not of that form."""
    try:
        cond = op.regions[0].blocks[0]
        # the compare the condition returns, and only that one: a first compare that is not what the loop tests
        # (``(j < 1) | (i < n)``) would give a wrong trip count
        returned = list(cond.operations)[-1].operands[0].owner
        cmp = getattr(returned, "operation", returned)
        if cmp.name != "stablehlo.compare":
            return None
        direction = str(cmp.attributes["comparison_direction"]).rsplit(" ", 1)[-1].strip(">")
        lhs, rhs = cmp.operands
        k = next(i for i, a in enumerate(cond.arguments) if a == lhs)
        bound, start = _constant(ir, rhs), _constant(ir, op.operands[k])
        if bound is None or start is None:
            return None
        step = _loop_step(ir, op.regions[1].blocks[0], k)
        if step in (None, 0):
            return None
        span = bound - start
        if direction == "NE" and span % step:
            return None  # the counter steps over its bound and wraps around: no count can be read
        trips = None
        if direction in ("LT", "NE") and step > 0 and span >= 0:
            trips = max(0, -(-span // step))
        elif direction == "LE" and step > 0 and span >= 0:
            trips = span // step + 1
        elif direction in ("GT", "NE") and step < 0 and span <= 0:
            trips = max(0, -(-(-span) // -step))
        elif direction == "GE" and step < 0 and span <= 0:
            trips = (-span) // -step + 1
        if trips is None or not _fits(str(lhs.type), start + trips * step):
            return None  # the last step overflows the counter's type: it wraps and the loop goes on
        return trips
    except (StopIteration, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def _fits(type_text: str, value: int) -> bool:
    """Whether ``value`` is representable in the integer element type ``type_text`` names (``tensor<i32>``,
    ``tensor<ui8>``, ...); False for any other type (a float counter's count is not read)."""
    import re

    found = re.search(r"\b(u?i)(\d+)\b", type_text.replace("tensor<", " ").replace(">", " "))
    if found is None:
        return False
    bits = int(found.group(2))
    if found.group(1) == "ui":
        return 0 <= value < (1 << bits)
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def _loop_step(ir: Any, body: Any, k: int) -> int | None:
    ret = list(body.operations)[-1]
    value = ret.operands[k]
    owner = value.owner
    name = getattr(getattr(owner, "operation", owner), "name", "")
    if name not in ("stablehlo.add", "stablehlo.subtract"):
        return None
    a, b = owner.operands
    if a != body.arguments[k]:
        return None
    c = _constant(ir, b)
    if c is None:
        return None
    return c if name == "stablehlo.add" else -c


def _constant(ir: Any, value: Any) -> int | None:
    owner = value.owner
    name = getattr(getattr(owner, "operation", owner), "name", "")
    if name != "stablehlo.constant":
        return None
    try:
        attr = ir.DenseIntElementsAttr(owner.attributes["value"])
    except (TypeError, ValueError):
        return None
    return int(attr[0]) if len(attr) == 1 or attr.is_splat else None
