"""The task model: a reference function, its input spec, tolerances and scales.

A :class:`Task` never holds arrays. Shapes are data (:class:`ArgSpec`), so a
task can be listed, hashed and shipped to a sandbox process without allocating
its inputs; arrays are drawn on demand by :meth:`Task.make_inputs`.

Calling convention (the same for the reference and every candidate)::

    reference(*dynamic_args, *static_values)

where ``static_values`` are the values of :attr:`Task.static` in order, or,
for tasks with ``static_as_kwargs=True``, ``reference(*dynamic, **static)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mk.errors import TaskError

#: Distributions the frozen suite may draw a floating input from.
#: ``normal``/``uniform``/``wide`` keep each input's own location and scale (a query pre-scaled by 1/sqrt(d) stays
#: so); ``large_magnitude`` adds activation outliers sized to the dtype (float16: past the square-root of its range);
#: ``small_magnitude``, ``zeros``, ``ones`` and ``negative`` are the edge cases a test synthesizer can ask for;
#: ``edges`` gives real data's boundary values: floating inputs drawn as ``normal`` with whole rows (about a quarter,
#: at least one) and one column exactly zero (padding, masked tokens), integer ``randint`` inputs with about half of
#: their entries at the two ends of their range (label 0 and V - 1, the first and last page)
FLOAT_DISTRIBUTIONS = ("native", "normal", "uniform", "wide", "large_magnitude", "small_magnitude", "zeros", "ones", "negative",
                       "edges")
INIT_KINDS = ("normal", "uniform", "randint", "ones", "zeros", "constant", "native", "outliers", "negative", "zero_rows")


@dataclass(frozen=True)
class Init:
    """How one input is initialised.

    ``kind`` is one of ``normal`` (``mean``, ``std``), ``uniform`` (``low``,
    ``high``), ``randint`` (``low`` inclusive, ``high`` exclusive), ``ones``,
    ``zeros``, ``constant`` (``value``) or ``native``: the values come from
    the task's own input generator and are never redrawn (index arrays,
    lengths, page tables and other structured inputs).
    """

    kind: str = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = 0.0
    high: float = 1.0
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in INIT_KINDS:
            raise TaskError(f"unknown init kind {self.kind!r}; use one of {', '.join(INIT_KINDS)}")

    @classmethod
    def parse(cls, value: "Init | str | Mapping[str, Any] | None", dtype: str) -> "Init":
        """Accept an Init, a kind name, or a mapping such as ``{"kind": "uniform", "low": 0}``."""
        if value is None:
            return cls("normal") if _is_float(dtype) else cls("native")
        if isinstance(value, Init):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            return cls(**dict(value))
        raise TaskError(f"cannot read an input init from {value!r}")

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """Draw an array on the host. ``native`` cannot be drawn here. Large floating inputs are drawn in
        chunks straight into the target dtype, so a 512 MiB bf16 input costs 512 MiB, not a float64 copy."""
        size = int(np.prod(shape)) if shape else 1
        if self.kind == "zero_rows":  # normal (chunked when large), then whole rows and a column set to zero
            return zero_rows(rng, Init("normal", mean=self.mean, std=self.std).sample(rng, shape, dtype))
        if self.kind in ("normal", "uniform", "outliers", "negative") and size > _CHUNK:
            out = np.empty(size, np_dtype(dtype))
            for lo in range(0, size, _CHUNK):
                n = min(_CHUNK, size - lo)
                out[lo:lo + n] = self.sample(rng, (n,), "float32").astype(out.dtype)
            return out.reshape(shape)
        if self.kind == "normal":
            x = rng.standard_normal(shape, dtype=np.float32) * self.std + self.mean
        elif self.kind == "uniform":
            x = rng.uniform(self.low, self.high, size=shape).astype(np.float32)
        elif self.kind == "randint":
            x = rng.integers(int(self.low), int(self.high), size=shape)
        elif self.kind == "outliers":  # normal, with one value in a hundred at +-value (activation outliers)
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(self.std) + np.float32(self.mean)
            hit = rng.random(shape, dtype=np.float32) < 0.01
            x = np.where(hit, np.where(rng.random(shape, dtype=np.float32) < 0.5, -self.value, self.value), x).astype(np.float32)
        elif self.kind == "negative":
            x = -np.abs(rng.standard_normal(shape, dtype=np.float32) * np.float32(self.std) + np.float32(self.mean))
        elif self.kind == "ones":
            x = np.ones(shape, np.float32)
        elif self.kind == "zeros":
            x = np.zeros(shape, np.float32)
        elif self.kind == "constant":
            x = np.full(shape, self.value, np.float32)
        else:
            raise TaskError("a 'native' input can only come from the task's own generator")
        return np.asarray(x).astype(np_dtype(dtype))


#: elements drawn at a time for large inputs
_CHUNK = 1 << 22


def zero_rows(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Zero rows of ``x`` (vectors along the last axis; at least one and never all, when there are two or more) and,
    for two or more axes, one column of the last axis, in place. The rows: about a quarter, scattered, and the last
    or the first half of the rows of some sequences (the second-to-last axis, per leading index; all rows for two
    axes; both kinds where there are two sequences or more), as padding, masked prompts and loss-masked tokens come,
    in runs at either end of a sequence, so whole blocks of rows are zero too (round 12, red teams: kernels that
    skipped a block whose rows were all zero passed scattered rows, then heads when only tails were zero)."""
    if x.ndim == 0 or x.size == 0:
        return x
    flat = x.reshape(-1, x.shape[-1]) if x.ndim >= 2 else x.reshape(-1, 1)
    n = flat.shape[0]
    if n >= 2:  # one row alone is left as drawn (zeroing it would zero the input)
        hit = rng.random(n) < 0.25
        hit[rng.integers(n)] = True
        seq = x.shape[-2] if x.ndim >= 3 else n
        if seq >= 2:
            runs = hit.reshape(-1, seq)  # a view: one row per sequence
            chosen = rng.random(runs.shape[0]) < 0.5
            chosen[rng.integers(runs.shape[0])] = True
            heads = rng.random(runs.shape[0]) < 0.5  # left padding, a masked prompt
            if runs.shape[0] >= 2:  # both kinds where there are two sequences to hold them
                first, second = rng.choice(runs.shape[0], 2, replace=False)
                chosen[[first, second]], heads[first], heads[second] = True, True, False
            runs[chosen & ~heads, seq - seq // 2:] = True
            runs[chosen & heads, :seq // 2] = True
        if hit.all():
            hit[rng.integers(n)] = False
        flat[hit] = 0
    if x.ndim >= 2 and x.shape[-1] >= 2:
        flat[:, rng.integers(x.shape[-1])] = 0
    return x


def range_ends(rng: np.random.Generator, x: np.ndarray, low: int, high: int) -> np.ndarray:
    """About half of an integer array's entries set to the ends of its range ``[low, high)``: a quarter to ``low``,
    a quarter to ``high - 1``, in place."""
    u = rng.random(x.shape)
    x[u < 0.25] = low
    x[(u >= 0.25) & (u < 0.5)] = high - 1
    return x


@dataclass(frozen=True)
class ArgSpec:
    """One dynamic input: name, shape (ints, or dim names resolved per scale), dtype, init."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    init: Init = field(default_factory=Init)

    def __post_init__(self) -> None:
        if self.init.kind == "randint" and np.dtype(self.dtype).kind in "iu":
            info = np.iinfo(np.dtype(self.dtype))
            if int(self.init.low) < info.min or int(self.init.high) - 1 > info.max:
                raise TaskError(f"input {self.name!r}: randint [{self.init.low}, {self.init.high}) does not fit "
                                f"{self.dtype} ([{info.min}, {info.max}])",
                                hint=f"draw it within the dtype, e.g. high={int(info.max) + 1}")

    def resolve(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        out = []
        for d in self.shape:
            if isinstance(d, str):
                if d not in dims:
                    raise TaskError(f"input {self.name!r} uses dim {d!r}, which the scale does not define")
                out.append(int(dims[d]))
            else:
                out.append(int(d))
        return tuple(out)


@dataclass(frozen=True)
class Scale:
    """A named problem size. ``dims`` resolve symbolic shapes; ``shapes`` (per
    input, in order) override them; ``static`` overrides static values."""

    name: str
    dims: Mapping[str, int] = field(default_factory=dict)
    shapes: tuple[tuple[int, ...], ...] | None = None
    static: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tolerance:
    """``atol``/``rtol``: one number for all outputs, or one per output."""

    atol: float | tuple[float, ...] = 1e-5
    rtol: float | tuple[float, ...] = 1e-5

    def for_output(self, i: int) -> tuple[float, float]:
        def pick(v: float | tuple[float, ...]) -> float:
            if isinstance(v, tuple):
                return float(v[min(i, len(v) - 1)])
            return float(v)

        return pick(self.atol), pick(self.rtol)


@dataclass(frozen=True)
class StaticArg:
    name: str
    value: Any


@dataclass(frozen=True)
class Task:
    """A reference computation to beat, with everything needed to judge a candidate."""

    name: str
    reference: Callable[..., Any]
    args: tuple[ArgSpec, ...]
    scales: Mapping[str, Scale]
    static: tuple[StaticArg, ...] = ()
    tolerance: Tolerance = field(default_factory=Tolerance)
    description: str = ""
    source: Path | None = None
    kind: str = "callable"  # callable | module | maxkernel | jaxbench | builtin
    static_as_kwargs: bool = False
    default_scale: str = "full"
    #: ``native_inputs(scale, seed) -> (dynamic, static)``: the task's own generator (a one-argument
    #: ``native_inputs(scale)`` is also accepted: it draws the same arrays for every seed).
    native_inputs: Callable[..., tuple[Sequence[Any], Sequence[Any]]] | None = None
    #: Where a sandbox process can re-load this task (kind, path, id).
    locator: Mapping[str, str] = field(default_factory=dict)
    #: Held-out scales: judged, never shown to an author. ``None`` derives them from the scales
    #: (:mod:`mk.harness.heldout`); ``()`` declares that the task has none.
    heldout: tuple[Scale, ...] | None = None
    #: Allowed shapes: dim name -> the multiple its held-out sizes keep (``0`` pins the dim to its values).
    dim_units: Mapping[str, int] = field(default_factory=dict)
    #: Static arguments that may vary: name -> the value a held-out case uses (``None`` pins it).
    vary_static: Mapping[str, Any] = field(default_factory=dict)
    #: Declared scales a run keeps out of its cases (``--scale ci``): the judge still compiles the candidate for the
    #: chip at them (:mod:`mk.harness.chipcheck`), since that costs seconds where interpreting costs hours.
    compile_only: Mapping[str, Scale] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.reference):
            raise TaskError(f"task {self.name!r}: the reference is not callable", path=self.source)
        if not self.scales:
            raise TaskError(f"task {self.name!r} defines no scale", path=self.source)
        if self.default_scale not in self.scales:
            object.__setattr__(self, "default_scale", next(iter(self.scales)))
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise TaskError(f"task {self.name!r} has duplicate input names {names}", path=self.source)

    # --- shapes -----------------------------------------------------------
    def scale(self, name: str | None = None) -> Scale:
        name = name or self.default_scale
        if name not in self.scales:
            raise TaskError(
                f"task {self.name!r} has no scale {name!r}",
                path=self.source,
                hint=f"choose one of: {', '.join(self.scales)}",
            )
        return self.scales[name]

    def shapes(self, scale: str | None = None) -> list[tuple[int, ...]]:
        sc = self.scale(scale)
        if sc.shapes is not None:
            if len(sc.shapes) != len(self.args):
                raise TaskError(f"scale {sc.name!r} gives {len(sc.shapes)} shapes for {len(self.args)} inputs", path=self.source)
            return [tuple(int(d) for d in s) for s in sc.shapes]
        return [a.resolve(sc.dims) for a in self.args]

    def arg_structs(self, scale: str | None = None) -> list[Any]:
        import jax

        return [jax.ShapeDtypeStruct(s, np_dtype(a.dtype)) for a, s in zip(self.args, self.shapes(scale))]

    def static_values(self, scale: str | None = None) -> list[Any]:
        sc = self.scale(scale)
        return [sc.static.get(s.name, s.value) for s in self.static]

    # --- calling ----------------------------------------------------------
    def bind(self, fn: Callable[..., Any], scale: str | None = None) -> Callable[..., Any]:
        """``fn`` with the static arguments of ``scale`` applied: ``g(*dynamic)``."""
        values = self.static_values(scale)
        if self.static_as_kwargs:
            kw = {s.name: v for s, v in zip(self.static, values)}
            return lambda *dyn: fn(*dyn, **kw)
        return lambda *dyn: fn(*dyn, *values)

    def output_structs(self, scale: str | None = None) -> Any:
        """Output shapes and dtypes from ``jax.eval_shape`` (no allocation)."""
        import jax

        return jax.eval_shape(self.bind(self.reference, scale), *self.arg_structs(scale))

    # --- inputs -----------------------------------------------------------
    def make_inputs(self, scale: str | None = None, seed: int = 0, distribution: str = "native") -> list[np.ndarray]:
        """Host arrays for one case. ``distribution`` is ``native`` (each input's
        own init) or one of :data:`FLOAT_DISTRIBUTIONS`, which replaces the init
        of floating inputs. ``native``-init inputs come from :attr:`native_inputs`."""
        shapes = self.shapes(scale)
        if distribution == "native" and self.native_inputs is not None:
            dyn = [np.asarray(x) for x in self.generate(scale, seed)[0]]
            got = [tuple(x.shape) for x in dyn]
            if got != [tuple(s) for s in shapes]:
                raise TaskError(f"the task's input generator returned shapes {got}, the spec says {shapes}", path=self.source)
            return dyn
        rng = np.random.default_rng(np.random.SeedSequence([seed, _stable_int(self.name)]))
        native: list[Any] | None = None
        out = []
        for i, (spec, shape) in enumerate(zip(self.args, shapes)):
            init = spec.init
            if distribution != "native" and _is_float(spec.dtype) and init.kind != "native":
                init = _override(distribution, init, spec.dtype)
            if init.kind == "native":
                if native is None:
                    if self.native_inputs is None:
                        raise TaskError(f"input {spec.name!r} has a native init but the task has no input generator", path=self.source)
                    native = list(self.generate(scale, seed)[0])
                out.append(np.asarray(native[i]))
            else:
                x = init.sample(rng, shape, spec.dtype)
                if distribution == "edges" and init.kind == "randint":  # labels, indices: the ends of their range
                    x = range_ends(rng, np.array(x), int(init.low), int(init.high))
                    if np.dtype(x.dtype).kind == "b" or (int(init.low), int(init.high)) == (0, 2):
                        x = zero_rows(rng, x)  # a mask: whole rows (a padded sequence, a query seeing no key) off
                out.append(x)
        return out

    def generate(self, scale: str | None = None, seed: int = 0) -> tuple[Sequence[Any], Sequence[Any]]:
        """The task's own generator at ``scale``, given ``seed`` when it takes one."""
        if self.native_inputs is None:
            raise TaskError(f"task {self.name!r} has no input generator", path=self.source)
        name = self.scale(scale).name
        return self.native_inputs(name, seed) if self.seeded_generator else self.native_inputs(name)

    @property
    def seeded_generator(self) -> bool:
        """True when :attr:`native_inputs` takes a seed (each case then draws its own structured inputs)."""
        if self.native_inputs is None:
            return False
        try:
            params = [p for p in inspect.signature(self.native_inputs).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        except (TypeError, ValueError):
            return False
        return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)

    # --- identity ---------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """A JSON-able summary: inputs and shapes per scale, statics, tolerances."""
        return {
            "name": self.name,
            "kind": self.kind,
            "source": str(self.source) if self.source else None,
            "inputs": [{"name": a.name, "dtype": a.dtype, "init": a.init.kind} for a in self.args],
            "scales": {n: [list(s) for s in self.shapes(n)] for n in self.scales},
            "static": {s.name: _jsonable(s.value) for s in self.static},
            "atol": _jsonable(self.tolerance.atol),
            "rtol": _jsonable(self.tolerance.rtol),
            "description": self.description,
        }

    def fingerprint(self) -> str:
        """Hash of the reference source, what it computes and the spec: changes when the task does.

        What it computes is its jaxpr at the default scale with its constants' bytes, so a changed global or
        closed-over value changes the fingerprint (and with it the judge's cached reference outputs) even where
        the source text is the same."""
        cached = self.__dict__.get("_fingerprint")
        if cached is not None:
            return cached
        try:
            src = inspect.getsource(self.reference)
        except (OSError, TypeError):
            src = repr(self.reference)
        blob = json.dumps({"src": src, "spec": self.describe(), "computes": self._computation()}, sort_keys=True, default=str)
        value = hashlib.sha256(blob.encode()).hexdigest()[:16]
        object.__setattr__(self, "_fingerprint", value)
        return value

    def _computation(self) -> str:
        """A digest of the reference's jaxpr and constants at the default scale ("" when it cannot be traced)."""
        import re

        import jax

        try:
            closed = jax.make_jaxpr(self.bind(self.reference))(*self.arg_structs())
        except Exception:  # noqa: BLE001 - a reference that cannot be traced abstractly keeps its source identity
            return ""
        h = hashlib.sha256(re.sub(r"0x[0-9a-fA-F]{6,}", "0x", str(closed.jaxpr)).encode())
        for c in closed.consts:
            a = np.ascontiguousarray(np.asarray(c))
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(a.tobytes())
        return h.hexdigest()

    def with_scales(self, scales: Mapping[str, Scale]) -> "Task":
        return dataclasses.replace(self, scales=dict(scales))

    def only_scale(self, name: str) -> "Task":
        """The task judged at scale ``name`` alone; its other declared scales stay as :attr:`compile_only`."""
        return self.only_scales([name])

    def only_scales(self, names: Sequence[str]) -> "Task":
        """The task judged at ``names`` only; its other declared scales stay as :attr:`compile_only`."""
        kept = {n: self.scale(n) for n in names}
        return dataclasses.replace(self, scales=kept,
                                   compile_only={**self.compile_only, **{n: s for n, s in self.scales.items() if n not in kept}})


def np_dtype(name: str) -> np.dtype:
    """numpy dtype for a dtype name, bfloat16 and fp8 included (via ml_dtypes)."""
    try:
        import jax.numpy as jnp

        return np.dtype(getattr(jnp, name)) if hasattr(jnp, name) else np.dtype(name)
    except (TypeError, AttributeError) as exc:
        raise TaskError(f"unknown dtype {name!r}") from exc


def dtype_name(dtype: Any) -> str:
    return np.dtype(dtype).name


def _is_float(dtype: str) -> bool:
    return np.issubdtype(np_dtype(dtype), np.floating) or "float" in dtype


def _override(distribution: str, own: Init | None = None, dtype: str = "float32") -> Init:
    """The init a distribution gives an input whose own init is ``own``: centred and scaled like it."""
    mean, std = _location_scale(own)
    if distribution == "normal":
        return Init("normal", mean=mean, std=std)
    if distribution == "uniform":
        half = std * math.sqrt(3.0)
        return Init("uniform", low=mean - half, high=mean + half)
    if distribution == "wide":
        return Init("normal", mean=mean + 0.5 * std, std=3.0 * std)
    if distribution == "large_magnitude":
        return Init("outliers", mean=mean, std=std, value=_outlier(dtype, std))
    if distribution == "small_magnitude":
        return Init("normal", mean=0.0, std=std * 1e-3)
    if distribution == "zeros":
        return Init("zeros")
    if distribution == "ones":
        return Init("ones")
    if distribution == "negative":
        return Init("negative", mean=mean, std=std)
    if distribution == "edges":
        return Init("zero_rows", mean=mean, std=std)
    raise TaskError(f"unknown input distribution {distribution!r}; use one of {', '.join(FLOAT_DISTRIBUTIONS)}")


def _location_scale(init: Init | None) -> tuple[float, float]:
    if init is None or init.kind in ("native", "zeros", "ones", "constant", "randint"):
        return 0.0, 1.0
    if init.kind == "uniform":
        return (init.low + init.high) / 2, max((init.high - init.low) / math.sqrt(12.0), 1e-6)
    return float(init.mean), max(float(init.std), 1e-6)


def _outlier(dtype: str, std: float) -> float:
    """Outlier magnitude: large against the input's scale and, for float16, large enough that its square overflows."""
    try:
        top = float(np.finfo(np_dtype(dtype)).max)
    except (TypeError, ValueError):
        top = 3.4e38
    return float(min(max(100.0 * std, 300.0), 2.0 * math.sqrt(top)))


def _stable_int(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v if not (isinstance(v, float) and math.isnan(v)) else "nan"
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)
