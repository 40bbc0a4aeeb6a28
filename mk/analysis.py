"""Static analysis of a task's reference: what it computes and its roofline floor.

No LM and no device. The reference is traced to a jaxpr at one scale
(``jax.make_jaxpr(task.bind(task.reference, scale))(*task.arg_structs(scale))``)
and walked, recursing into sub-jaxprs (jit/pjit, custom_jvp/vjp, remat, scan,
while, cond), to count:

* primitives (static occurrences);
* FLOPs by mk's own rules: ``dot_general`` = 2·(lhs elements)·(rhs free
  elements); convolutions = 2·(output elements)·(kernel elements per output
  feature), padded taps included (XLA skips them, so it counts less); elementwise arithmetic and comparisons = 1 per output element;
  reductions and cumulative ops = 1 per input element; transcendental ops
  (exp, log, tanh, logistic, sqrt, rsqrt, erf, sin, pow ...) are counted
  apart, as XLA does. A scan body counts ``length`` times; a while body once
  (its trip count is unknown statically: noted); a cond counts its costliest
  branch;
* the main ops with their shapes (matmuls, convolutions, reductions,
  transcendental, gather/scatter);
* the minimum bytes: inputs (and captured constants) read once plus outputs
  written once;
* arithmetic intensity and, per hardware spec, the roofline floor (a lower
  bound on one device's time, see :mod:`mk.hardware`).

XLA's own count (``jax.jit(f).lower(...).compile().cost_analysis()``, compiled
for the host here) is recorded beside mk's as a cross-check.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from mk import hardware
from mk.errors import TargetError, TaskError

log = logging.getLogger(__name__)

DEFAULT_TARGET_SPECS = ("v6e", "h200")
MAIN_CATEGORIES = ("matmul", "conv", "reduction", "transcendental", "movement")

ELEMENTWISE = frozenset(
    "add sub mul div rem max min neg abs sign floor ceil round square integer_pow clamp nextafter "
    "eq ne lt gt le ge select_and_scatter_add add_any is_finite copysign".split()
)
TRANSCENDENTAL = frozenset(
    "exp exp2 log log1p expm1 tanh logistic sin cos tan asin acos atan sinh cosh asinh acosh atanh "
    "atan2 pow sqrt rsqrt cbrt erf erfc erf_inv lgamma digamma igamma igammac random_gamma_grad "
    "bessel_i0e bessel_i1e polygamma zeta".split()
)
REDUCTIONS = frozenset(
    "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor argmax argmin reduce "
    "cumsum cumprod cummax cummin cumlogsumexp reduce_precision".split()
)
MOVEMENT = frozenset("gather scatter scatter-add scatter_add scatter_mul scatter_min scatter_max dynamic_slice dynamic_update_slice sort".split())
#: Primitives that move or relabel data and do no arithmetic.
NO_FLOPS = frozenset(
    "broadcast_in_dim reshape transpose slice concatenate pad iota copy copy_p squeeze expand_dims rev select_n "
    "convert_element_type bitcast_convert_type gather dynamic_slice dynamic_update_slice stop_gradient "
    "and or not xor shift_left shift_right_logical shift_right_arithmetic population_count clz "
    "random_bits random_seed random_wrap random_unwrap threefry2x32 sort argsort iota split "
    "device_put optimization_barrier pjit jit closed_call core_call custom_jvp_call custom_vjp_call "
    "custom_vjp_call_jaxpr remat checkpoint scan while cond sharding_constraint mesh_cast "
    "real imag conj complex platform_index".split()
)


class Cost(BaseModel):
    """XLA's cost estimate for one compiled computation."""

    model_config = ConfigDict(frozen=True)
    flops: float
    bytes: float
    transcendentals: float = 0.0


class OpInfo(BaseModel):
    """One distinct operation (primitive + shapes), with how often and how much it costs."""

    primitive: str
    category: str  # matmul | conv | reduction | transcendental | movement | elementwise | other
    in_shapes: list[str]
    out_shapes: list[str]
    detail: str = ""
    count: int = 1  # static occurrences
    flops: float = 0.0  # total over occurrences and loop trips
    transcendentals: float = 0.0

    def line(self) -> str:
        ins = ", ".join(self.in_shapes)
        outs = ", ".join(self.out_shapes)
        extra = f" {self.detail}" if self.detail else ""
        work = f"{_si(self.flops)}FLOP" if self.flops else ""
        if self.transcendentals:
            work = (work + " + " if work else "") + f"{_si(self.transcendentals).strip()} transcendental"
        times = f" x{self.count}" if self.count > 1 else ""
        return f"{self.primitive}({ins}){extra} -> {outs}{times}" + (f"  [{work}]" if work else "")


class Floor(BaseModel):
    """The roofline floor on one hardware spec."""

    spec: str
    dtype: str
    seconds: float
    compute_seconds: float
    memory_seconds: float
    bound: str
    approximate: bool = False


class TaskAnalysis(BaseModel):
    task_name: str
    scale: str
    inputs: list[str]
    outputs: list[str]
    primitive_counts: dict[str, int]
    ops: list[OpInfo]
    flops: float
    transcendentals: float
    input_bytes: int
    output_bytes: int
    min_bytes: int
    arithmetic_intensity: float
    compute_dtype: str
    xla_cost: Cost | None = None
    floors: dict[str, Floor]
    notes: list[str] = []

    def main_ops(self, limit: int = 8) -> list[OpInfo]:
        keep = [o for o in self.ops if o.category in MAIN_CATEGORIES]
        ranked = sorted(keep, key=lambda o: (o.flops + o.transcendentals), reverse=True)
        return ranked[:limit]

    def summary(self, max_ops: int = 8) -> str:
        """A compact text block for prompts and reports."""
        lines = [f"Task {self.task_name} (scale {self.scale}): {', '.join(self.inputs)} -> {', '.join(self.outputs)}"]
        xla = f" (XLA counts {_si(self.xla_cost.flops)}FLOP)" if self.xla_cost else ""
        lines.append(
            f"Work: {_si(self.flops)}FLOP{xla}, {_si(self.transcendentals).strip()} transcendental; "
            f"min bytes {_si(self.min_bytes)}B (in {_si(self.input_bytes)}B, out {_si(self.output_bytes)}B); "
            f"intensity {self.arithmetic_intensity:.3g} FLOP/B; compute dtype {self.compute_dtype}"
        )
        ops = self.main_ops(max_ops)
        if ops:
            lines.append("Main ops:")
            lines += [f"  {o.line()}" for o in ops]
        counts = sorted(self.primitive_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("Primitives: " + ", ".join(f"{k} x{v}" for k, v in counts[:16]) + (" ..." if len(counts) > 16 else ""))
        if self.floors:
            lines.append("Roofline floor (one device, lower bound):")
            for f in self.floors.values():
                approx = " (placeholder spec)" if f.approximate else ""
                lines.append(
                    f"  {f.spec}: {_seconds(f.seconds)} {f.bound}-bound at {f.dtype} "
                    f"(compute {_seconds(f.compute_seconds)}, memory {_seconds(f.memory_seconds)}){approx}"
                )
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


# --- public functions -------------------------------------------------------------


def cost_analysis(fn: Callable[..., Any], *structs: Any) -> Cost:
    """XLA's estimate of FLOPs and bytes accessed, compiled for the default (host) backend."""
    import jax

    try:
        raw = jax.jit(fn).lower(*structs).compile().cost_analysis()
    except Exception as exc:  # compile errors come in many types
        raise TargetError(f"XLA could not compile the function for a cost estimate: {exc}") from exc
    if isinstance(raw, (list, tuple)):
        raw = raw[0] if raw else {}
    raw = raw or {}
    return Cost(
        flops=float(raw.get("flops", 0.0)),
        bytes=float(raw.get("bytes accessed", 0.0)),
        transcendentals=float(raw.get("transcendentals", 0.0)),
    )


def analyze(
    task: Any,
    scale: str | None = None,
    *,
    specs: Iterable[str | hardware.HardwareSpec] = DEFAULT_TARGET_SPECS,
    xla: bool = True,
) -> TaskAnalysis:
    """Analyse ``task``'s reference at ``scale`` (the task's default when None)."""
    import jax

    scale_name = task.scale(scale).name
    fn = task.bind(task.reference, scale_name)
    structs = task.arg_structs(scale_name)
    try:
        closed = jax.make_jaxpr(fn)(*structs)
    except Exception as exc:
        raise TaskError(f"task {task.name!r}: cannot trace the reference at scale {scale_name!r}: {exc}", path=task.source) from exc

    walker = _Walker()
    walker.walk(closed.jaxpr, 1.0)
    in_bytes = sum(_nbytes(v.aval) for v in closed.jaxpr.invars) + sum(_nbytes(np.asarray(c)) for c in closed.consts if hasattr(c, "shape"))
    out_bytes = sum(_nbytes(v.aval) for v in closed.jaxpr.outvars)
    min_bytes = int(in_bytes + out_bytes)
    notes = list(walker.notes)
    if walker.uncounted:
        notes.append(f"primitives with no FLOP rule (counted as 0): {', '.join(sorted(walker.uncounted))}")

    xla_cost = None
    if xla:
        try:
            xla_cost = cost_analysis(fn, *structs)
        except TargetError as exc:
            notes.append(str(exc))
        else:
            if walker.flops and xla_cost.flops and not (0.5 <= xla_cost.flops / walker.flops <= 2.0):
                notes.append(f"mk counts {_si(walker.flops)}FLOP, XLA {_si(xla_cost.flops)}FLOP (XLA counts loop bodies once and counts conversions; mk may lack a rule)")

    dtype = walker.compute_dtype(structs)
    floors = {}
    for s in specs:
        spec = hardware.get_spec(s)
        floors[spec.name] = _floor(spec, walker.flops, min_bytes, dtype)
    return TaskAnalysis(
        task_name=task.name,
        scale=scale_name,
        inputs=[_shape_str(v.aval) for v in closed.jaxpr.invars],
        outputs=[_shape_str(v.aval) for v in closed.jaxpr.outvars],
        primitive_counts=dict(sorted(walker.counts.items())),
        ops=sorted(walker.ops.values(), key=lambda o: -(o.flops + o.transcendentals)),
        flops=walker.flops,
        transcendentals=walker.transcendentals,
        input_bytes=int(in_bytes),
        output_bytes=int(out_bytes),
        min_bytes=min_bytes,
        arithmetic_intensity=(walker.flops / min_bytes) if min_bytes else math.inf,
        compute_dtype=dtype,
        xla_cost=xla_cost,
        floors=floors,
        notes=notes,
    )


def _floor(spec: hardware.HardwareSpec, flops: float, nbytes: int, dtype: str) -> Floor:
    run_as = spec.f32_matmul_default if dtype == "float32" else dtype
    try:
        spec.peak(run_as)
    except TargetError:
        run_as = "bfloat16"  # no published rate for this dtype: the MXU/tensor-core rate bounds it
    return Floor(
        spec=spec.name,
        dtype=run_as,
        seconds=hardware.roofline_seconds(flops, nbytes, spec, run_as),
        compute_seconds=hardware.compute_seconds(flops, spec, run_as),
        memory_seconds=hardware.memory_seconds(nbytes, spec),
        bound=hardware.bound(flops, nbytes, spec, run_as),
        approximate=spec.approximate,
    )


# --- the jaxpr walk ------------------------------------------------------------------


class _Walker:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.ops: dict[tuple, OpInfo] = {}
        self.flops = 0.0
        self.transcendentals = 0.0
        self.notes: list[str] = []
        self._uncounted: set[str] = set()
        self._dtype_flops: dict[str, float] = {}  # matmul/conv flops by operand dtype
        self._any_dtype_flops: dict[str, float] = {}

    def walk(self, jaxpr: Any, mult: float) -> None:
        for eqn in jaxpr.eqns:
            self._eqn(eqn, mult)

    def _eqn(self, eqn: Any, mult: float) -> None:
        name = eqn.primitive.name
        self.counts[name] = self.counts.get(name, 0) + 1
        params = eqn.params
        if name == "scan":
            self.walk(_open(params["jaxpr"]), mult * int(params.get("length", 1)))
            return
        if name == "while":
            self.walk(_open(params["cond_jaxpr"]), mult)
            self.walk(_open(params["body_jaxpr"]), mult)
            self._note("a while loop's trip count is unknown statically: its body is counted once")
            return
        if name == "cond":
            self._costliest_branch(params["branches"], mult)
            return
        subs = list(_sub_jaxprs(params))
        if subs:
            if name == "pallas_call":
                self._note("the reference contains a pallas_call: its kernel body is counted once, not per grid step")
            for sub in subs:
                self.walk(sub, mult)
            return
        self._leaf(eqn, name, mult)

    def _costliest_branch(self, branches: Sequence[Any], mult: float) -> None:
        best: _Walker | None = None
        for br in branches:
            w = _Walker()
            w.walk(_open(br), mult)
            for k, v in w.counts.items():  # static counts include every branch
                self.counts[k] = self.counts.get(k, 0) + v
            if best is None or (w.flops + w.transcendentals) > (best.flops + best.transcendentals):
                best = w
        if best is None:
            return
        self.flops += best.flops
        self.transcendentals += best.transcendentals
        for key, op in best.ops.items():
            self._merge(key, op)
        for d, f in best._dtype_flops.items():
            self._dtype_flops[d] = self._dtype_flops.get(d, 0.0) + f
        for d, f in best._any_dtype_flops.items():
            self._any_dtype_flops[d] = self._any_dtype_flops.get(d, 0.0) + f
        for n in best.notes:
            self._note(n)
        self._uncounted |= best._uncounted

    def _leaf(self, eqn: Any, name: str, mult: float) -> None:
        ins = [v.aval for v in eqn.invars if hasattr(v.aval, "shape")]
        outs = [v.aval for v in eqn.outvars if hasattr(v.aval, "shape")]
        out_elems = sum(_size(a) for a in outs)
        in_elems = _size(ins[0]) if ins else 0
        flops = transc = 0.0
        detail = ""
        if name == "dot_general":
            category = "matmul"
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            lhs, rhs = ins[0], ins[1]
            rhs_free = math.prod(d for i, d in enumerate(rhs.shape) if i not in rc and i not in rb)
            flops = 2.0 * _size(lhs) * rhs_free
            detail = f"contract {tuple(lc)}x{tuple(rc)}" + (f" batch {tuple(lb)}x{tuple(rb)}" if lb else "")
        elif name == "conv_general_dilated":
            category = "conv"
            rhs = ins[1]
            dn = eqn.params["dimension_numbers"]
            out_feat = rhs.shape[dn.rhs_spec[0]] if dn is not None else rhs.shape[0]
            flops = 2.0 * out_elems * (_size(rhs) / max(out_feat, 1))
            detail = f"strides {tuple(eqn.params['window_strides'])} groups {eqn.params['feature_group_count']}"
        elif name in TRANSCENDENTAL:
            category = "transcendental"
            transc = float(out_elems)
        elif name in REDUCTIONS:
            category = "reduction"
            flops = float(in_elems) if name != "reduce_precision" else 0.0
            axes = eqn.params.get("axes", eqn.params.get("axis"))
            detail = f"axes {tuple(axes) if isinstance(axes, (tuple, list)) else axes}" if axes is not None else ""
        elif name in ELEMENTWISE:
            category = "elementwise"
            flops = float(out_elems)
        elif name.startswith("scatter"):
            category = "movement"
            flops = float(_size(ins[2])) if name != "scatter" and len(ins) > 2 else 0.0
        elif name in MOVEMENT:
            category = "movement"
        else:
            category = "other"
            if name not in NO_FLOPS:
                self._uncounted.add(name)
        flops *= mult
        transc *= mult
        self.flops += flops
        self.transcendentals += transc
        if flops and ins:
            d = hardware.normalize_dtype(ins[0].dtype)
            self._any_dtype_flops[d] = self._any_dtype_flops.get(d, 0.0) + flops
            if category in ("matmul", "conv"):
                self._dtype_flops[d] = self._dtype_flops.get(d, 0.0) + flops
        if category == "other" and name in NO_FLOPS:
            return  # data movement: in the primitive counts only
        key = (name, tuple(_shape_str(a) for a in ins), tuple(_shape_str(a) for a in outs), detail)
        self._merge(key, OpInfo(primitive=name, category=category, in_shapes=list(key[1]), out_shapes=list(key[2]),
                                detail=detail, count=1, flops=flops, transcendentals=transc))

    def _merge(self, key: tuple, op: OpInfo) -> None:
        have = self.ops.get(key)
        if have is None:
            self.ops[key] = op.model_copy()
        else:
            have.count += op.count
            have.flops += op.flops
            have.transcendentals += op.transcendentals

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def uncounted(self) -> set[str]:
        return self._uncounted

    def compute_dtype(self, structs: Sequence[Any]) -> str:
        """The dtype most FLOPs run in: matmul/conv operands first, then any arithmetic, then the biggest input."""
        for table in (self._dtype_flops, self._any_dtype_flops):
            if table:
                return max(table.items(), key=lambda kv: kv[1])[0]
        if structs:
            biggest = max(structs, key=lambda s: _size(s) * np.dtype(s.dtype).itemsize)
            return hardware.normalize_dtype(biggest.dtype)
        return "float32"


def _open(j: Any) -> Any:
    """The open Jaxpr of a ClosedJaxpr (or the Jaxpr itself)."""
    return j.jaxpr if hasattr(j, "consts") and hasattr(j, "jaxpr") else j


def _sub_jaxprs(params: dict[str, Any]) -> Iterable[Any]:
    for value in params.values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for item in items:
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(item, "jaxpr") and hasattr(item, "consts") and hasattr(item.jaxpr, "eqns"):
                yield item.jaxpr


def _size(aval: Any) -> int:
    return int(math.prod(getattr(aval, "shape", ()) or ()))


def _nbytes(aval: Any) -> int:
    return _size(aval) * np.dtype(aval.dtype).itemsize


_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64", "int32": "i32", "int8": "i8", "bool": "bool", "int64": "i64", "uint8": "u8", "uint32": "u32"}


def _shape_str(aval: Any) -> str:
    dt = np.dtype(aval.dtype).name
    return f"{_SHORT.get(dt, dt)}[{','.join(str(d) for d in aval.shape)}]"


def _si(x: float) -> str:
    """``1.97e5`` -> ``"197 K"``; a unit follows directly (``f"{_si(x)}FLOP"``)."""
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "


def _seconds(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"
