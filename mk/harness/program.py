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
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

log = logging.getLogger(__name__)

#: custom-call targets that are the target's own kernels
KERNEL_TARGETS = {
    "tpu": frozenset({"tpu_custom_call"}),
    "gpu": frozenset({"__gpu$xla.gpu.triton", "triton_kernel_call", "mosaic_gpu", "mosaic_gpu_v2"}),
    "cpu": frozenset(),
}
#: custom calls XLA itself emits for partitioning/placement; they compute nothing
BENIGN_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement",
                            "MoveToHost", "MoveToDevice", "X64Combine", "X64SplitLow", "X64SplitHigh"})
#: jaxpr primitives that run host Python during the computation
CALLBACK_PRIMITIVES = frozenset({"pure_callback", "io_callback", "debug_callback", "debug_print", "callback", "host_callback"})
_LOW_PRECISIONS = ("DEFAULT", "HIGH", "BF16", "FASTEST", "ANY_F32")


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


def with_interpret(closed: Any, interpret: Any) -> Any:
    """``closed`` with every ``pallas_call`` (nested calls included) set to run with ``interpret``; the
    candidate's Python does not run again: this rewrites the one trace."""
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
    """In-kernel ``dot_general`` on float32 operands at a precision below HIGHEST (one bf16 pass on a TPU)."""
    found = []
    for eqn in pallas_eqns(jaxpr):
        body = eqn.params["jaxpr"]
        for inner in walk(body, into_kernels=True):
            if inner.primitive.name != "dot_general":
                continue
            dtypes = {str(getattr(v.aval, "dtype", "")) for v in inner.invars}
            precision = inner.params.get("precision")
            names = [str(p).rsplit(".", 1)[-1] for p in (precision if isinstance(precision, tuple) else (precision,))]
            if "float32" in dtypes and any(n in _LOW_PRECISIONS for n in names):
                found.append(f"{kernel_label(eqn)}: dot_general precision={'/'.join(names)}")
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


def output_bytes(closed: Any) -> int:
    return sum(int(getattr(v.aval, "size", 0)) * getattr(getattr(v.aval, "dtype", None), "itemsize", 0)
               for v in closed.jaxpr.outvars)


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
    return [s for s in sites if s.target in KERNEL_TARGETS[target]]


def foreign_calls(sites: Sequence[CallSite], target: str) -> list[CallSite]:
    """Custom calls that are neither the target's kernels nor XLA's own placement markers (host callbacks
    and any other opaque code)."""
    return [s for s in sites if s.target not in KERNEL_TARGETS[target] and s.target not in BENIGN_TARGETS]


def ablated(exported: Any, fills: Sequence[float | None], *, keep_operands: bool = False) -> Any:
    """A CPU-runnable ``Exported`` from ``exported`` (the target program) in which the i-th kernel custom call
    is replaced by a constant ``fills[i]`` (NaN for floats where ``fills[i]`` is None; integers get the
    dtype's minimum, booleans False). Every kernel must be replaced, since the CPU cannot run them.

    ``keep_operands``: the replacement still reads every operand of the kernel (one multiply by zero and
    one sum per operand element, added to a NaN fill), so whatever XLA computes to feed a kernel stays in
    the program: the variant then measures the work that runs outside kernels (see
    :func:`operand_elements` for the elements this adds)."""
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
                    value = hlo.ConstantOp(_splat(ir, rtype, fill)).result
                    if sink is not None and _is_float(ir, rtype.element_type):
                        scalar = hlo.ConvertOp(ir.RankedTensorType.get([], rtype.element_type), sink).result
                        value = hlo.AddOp(value, hlo.BroadcastInDimOp(rtype, scalar, ir.DenseI64ArrayAttr.get([])).result).result
                    result.replace_all_uses_with(value)
            op.operation.erase()
        for op in _custom_call_ops(module):  # placement markers are identities on one CPU device
            if _site(op)[0] in BENIGN_TARGETS and len(op.operands) == len(op.results):
                for src, result in zip(op.operands, op.results):
                    result.replace_all_uses_with(src)
                op.operation.erase()
        data = mlir.module_to_bytecode(module)
    return dataclasses.replace(exported, mlir_module_serialized=data, platforms=("cpu",))


def operand_elements(exported: Any) -> int:
    """The FLOPs ``keep_operands`` adds: a multiply and a sum per floating operand element of every kernel
    custom call, and one add per floating result element."""
    from jax._src.lib.mlir import ir

    ctx, module = _parse(exported.mlir_module())
    total = 0
    with ctx:
        for op in _custom_call_ops(module):
            if _site(op)[0] in BENIGN_TARGETS:
                continue
            for v in op.operands:
                if _is_float(ir, ir.RankedTensorType(v.type).element_type):
                    total += 2 * _size(ir, v.type)
            for r in op.results:
                if _is_float(ir, ir.RankedTensorType(r.type).element_type):
                    total += _size(ir, r.type)
    return total


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
        prod = hlo.MulOp(x, zero).result
        init = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(scalar_t, ir.FloatAttr.get(f32, 0.0))).result
        red = hlo.ReduceOp([scalar_t], [prod], [init], ir.DenseI64ArrayAttr.get(list(range(len(t.shape)))))
        block = red.regions[0].blocks.append(scalar_t, scalar_t)
        with ir.InsertionPoint(block):
            hlo.ReturnOp([hlo.AddOp(block.arguments[0], block.arguments[1]).result])
        total = red.result if total is None else hlo.AddOp(total, red.result).result
    return total


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


def _parse(text: str) -> tuple[Any, Any]:
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
_ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum", "negate", "abs", "exponential",
    "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh", "sine", "cosine", "tan", "sqrt", "rsqrt", "cbrt",
    "atan2", "floor", "ceil", "round_nearest_even", "round_nearest_afz", "sign", "select", "clamp", "compare", "erf"})


def flops(exported: Any) -> float:
    """Floating-point operations of ``exported``'s main function, counted from its StableHLO: a dot or a
    convolution as 2·MACs, an elementwise op or a reduction as one per element, a ``while`` loop's body
    times its trip count where the loop is a counted one (``i < constant`` from a constant start; otherwise
    once), a conditional as its most expensive branch, calls followed into their functions. XLA's own cost
    analysis counts a loop body once, which lets work hide in a ``fori_loop``."""
    from jax._src.lib.mlir import ir

    ctx, module = _parse(exported.mlir_module())
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
            if name == "func.call":
                return func_cost(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            if short == "while":
                cond, body = op.regions[0], op.regions[1]
                return _trip_count(ir, op) * (region_cost(cond) + region_cost(body))
            if short in ("case", "if"):
                return max((region_cost(r) for r in op.regions), default=0.0)
            if short == "dot_general":
                lhs = ir.RankedTensorType(op.operands[0].type)
                dims = str(op.attributes["dot_dimension_numbers"])
                contract = _dims(dims, "lhs_contracting_dimensions")
                k = 1
                for d in contract:
                    k *= lhs.shape[d]
                return 2.0 * _size(ir, op.results[0].type) * k
            if short == "convolution":
                rhs = ir.RankedTensorType(op.operands[1].type)
                out_feat = max(rhs.shape) if not rhs.shape else rhs.shape[-1]
                return 2.0 * _size(ir, op.results[0].type) * _size(ir, op.operands[1].type) / max(out_feat, 1)
            if short in ("reduce", "reduce_window"):
                return float(sum(_size(ir, v.type) for v in op.operands[: len(op.operands) // 2]))
            if short in _ELEMENTWISE and op.results and _is_float(ir, ir.RankedTensorType(op.results[0].type).element_type):
                return float(_size(ir, op.results[0].type))
            return sum(region_cost(r) for r in op.regions)

        return func_cost("main")


def _size(ir: Any, t: Any) -> int:
    n = 1
    for d in ir.RankedTensorType(t).shape:
        n *= d
    return n


def _dims(text: str, key: str) -> list[int]:
    import re

    m = re.search(key + r"\s*=\s*\[([^\]]*)\]", text)
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []


def _trip_count(ir: Any, op: Any) -> int:
    """``n`` for a loop whose condition is ``arg_k < constant n`` and whose ``arg_k`` starts at a constant."""
    try:
        cond = op.regions[0].blocks[0]
        ops = list(cond.operations)
        cmp = next(o for o in ops if o.operation.name == "stablehlo.compare")
        if "LT" not in str(cmp.attributes["comparison_direction"]):
            return 1
        lhs, rhs = cmp.operands
        bound = _constant(ir, rhs)
        k = next(i for i, a in enumerate(cond.arguments) if a == lhs)
        start = _constant(ir, op.operands[k])
        if bound is None or start is None:
            return 1
        return max(1, int(bound) - int(start))
    except (StopIteration, ValueError, TypeError, KeyError):
        return 1


def _constant(ir: Any, value: Any) -> int | None:
    owner = value.owner
    name = getattr(getattr(owner, "operation", owner), "name", "")
    if name != "stablehlo.constant":
        return None
    attr = ir.DenseIntElementsAttr(owner.attributes["value"])
    return int(attr[0]) if len(attr) == 1 or attr.is_splat else None
