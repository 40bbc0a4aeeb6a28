"""JAXBench-style ``baseline.py`` files.

A baseline defines ``CONFIG`` (a dict of sizes and constants),
``create_inputs(...)`` returning the dynamic inputs, and
``workload(*inputs, ...)``. How they map onto a :class:`~mk.task.Task`:

* inputs: ``jax.eval_shape`` of ``create_inputs`` (nothing is allocated).
  Parameters of ``create_inputs`` that have defaults (such as ``dtype``) keep
  them; a required parameter is filled from ``CONFIG`` when it has that name,
  else with a PRNG key when its name mentions a key/rng, or an int when it is a
  seed. Floating inputs are assumed N(0, 1) for the extra distributions of the
  frozen suite; integer and boolean inputs always come from ``create_inputs``
  itself.
* seeds: when ``create_inputs`` takes a seed or a PRNG key (a required
  parameter as above, or one with a default named ``seed``/``key``/``rng``,
  see :func:`seed_kind`), each case calls it with the case's seed:
  ``jax.random.PRNGKey(seed)`` for a key, ``seed`` itself for a seed, so every
  case draws fresh structured inputs (the task's generator takes
  ``(scale, seed)``). Seed 0 is what the loader always passed: ``PRNGKey(0)``
  / ``0`` for a required parameter, the default for one that has it.
  Without such a parameter every case gets the same inputs.
* static arguments: parameters of ``workload`` after the inputs whose names
  are ``CONFIG`` keys, passed as keywords (``workload(*inputs, **static)``).
  Parameters with defaults that ``CONFIG`` does not name keep their defaults.
* tolerances: ``CONFIG["atol"]``/``CONFIG["rtol"]`` (or ``CONFIG["tolerance"]``
  for both) when present, else :data:`DEFAULT_ATOL`/:data:`DEFAULT_RTOL`,
  the value nearly every JaxBench task states.
* scales: one, ``full`` (the shapes ``create_inputs`` builds from ``CONFIG``).
  ``CONFIG`` carries no smaller sizes a loader could trust to keep the
  computation's invariants, so no ``ci`` scale is invented here; the built-in
  suite (``jaxbench:<id>``) defines ``ci`` scales by hand.
* name: the folder name for ``<folder>/baseline.py``, else the file's stem.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mk.errors import TaskError
from mk.loaders import common
from mk.task import Scale, StaticArg, Task, Tolerance

log = logging.getLogger(__name__)

KIND = "jaxbench"
BASELINE_NAME = "baseline.py"
DEFAULT_ATOL = 1e-2
DEFAULT_RTOL = 1e-2
_HINT = "a JAXBench baseline defines CONFIG = {...}, create_inputs() returning the inputs, and workload(*inputs)"


def looks_like_baseline(path: Path) -> bool:
    """A cheap text check (no import): defines both ``create_inputs`` and ``workload``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "def create_inputs" in text and "def workload" in text


def load(path: Path, task_id: str | None = None) -> Task:
    file = path / BASELINE_NAME if path.is_dir() else path
    if not file.is_file():
        raise TaskError(f"missing {BASELINE_NAME}", path=path, hint=_HINT)
    module = common.import_file(file, KIND)
    create = common.require_function(module, "create_inputs", file, "return the workload's input arrays")
    workload = common.require_function(module, "workload", file, "workload(*inputs) computes the reference")
    config = getattr(module, "CONFIG", {})
    if not isinstance(config, Mapping):
        raise TaskError(f"CONFIG must be a dict, got {type(config).__name__}", path=file, hint=_HINT)
    generate, seeded = _generator(create, config, file)

    def split(out: Any) -> tuple[Sequence[Any], Any]:
        return _split(out, file), ()

    structs, _ = common.trace_generator(generate, split, file, "create_inputs()")
    names = common.input_names(workload, len(structs))
    statics = _statics(workload, len(structs), config, file)
    args = common.arg_specs(structs, names)
    tolerance = _tolerance(config, file)
    static_kw = {s.name: s.value for s in statics}
    common.check_tolerance_outputs(tolerance, workload, structs, static_kw, file)

    def draw(scale: str, seed: int) -> tuple[list[Any], list[Any]]:
        if scale != "full":
            raise TaskError(f"a JAXBench baseline has only the 'full' scale, not {scale!r}", path=file)
        current = getattr(module, "CONFIG", {})
        return common.host_inputs(_split(generate(seed), file), args, file), [current.get(s.name, s.value) for s in statics]

    native_inputs = common.native_generator(draw, seeded)  # each case's seed reaches create_inputs when it takes one

    name = file.parent.name if file.name == BASELINE_NAME else file.stem
    description = common.doc_summary(module) or str(config.get("name", ""))
    if getattr(module, "_skip_jit", False):
        description += " [reference is not jittable: run it eagerly]"
    return Task(
        name=name,
        reference=workload,
        args=args,
        scales={"full": Scale("full")},
        static=statics,
        tolerance=tolerance,
        description=description,
        source=file,
        kind=KIND,
        static_as_kwargs=True,
        native_inputs=native_inputs,
        locator=common.locator(KIND, file, task_id or name),
    )


#: parameter names that carry a seed or a PRNG key even when they have a default (see :func:`seed_kind`)
SEED_NAMES = ("seed", "random_seed", "rng_seed")
KEY_NAMES = ("key", "rng", "prng", "prng_key", "rng_key", "random_key")


def seed_kind(name: str, required: bool) -> str | None:
    """``"key"`` (a PRNG key), ``"seed"`` (an int) or None: what a generator parameter called ``name`` takes.
    A parameter with a default counts only under one of :data:`SEED_NAMES` / :data:`KEY_NAMES`; a required
    one whenever its name mentions a key/rng or a seed (it has to be given something)."""
    lname = name.lower()
    if not required:
        return "key" if lname in KEY_NAMES else "seed" if lname in SEED_NAMES else None
    if "key" in lname or "rng" in lname:
        return "key"
    return "seed" if "seed" in lname else None


def seeded_caller(fn: Callable[..., Any], fixed: Mapping[str, Any], seeds: Mapping[str, tuple[str, bool]]) -> Callable[..., Any]:
    """``call(seed=0)``: ``fn(**fixed)`` plus, per ``seeds`` entry ``name: (kind, required)``, the case's seed
    (``jax.random.PRNGKey(seed)`` for a key). At seed 0 a parameter with a default keeps it, so seed 0
    draws what a call without the seed always drew."""

    def call(seed: int = 0) -> Any:
        kwargs = dict(fixed)
        for name, (kind, required) in seeds.items():
            if required or seed != 0:
                if kind == "key":
                    import jax

                    kwargs[name] = jax.random.PRNGKey(int(seed))
                else:
                    kwargs[name] = int(seed)
        return fn(**kwargs)

    return call


def _generator(create: Callable[..., Any], config: Mapping[str, Any], file: Path) -> tuple[Callable[..., Any], bool]:
    """``create_inputs`` with its required parameters filled in, as ``generate(seed=0)``, and whether the seed
    reaches it (a seed or PRNG-key parameter)."""
    try:
        params = list(inspect.signature(create).parameters.values())
    except (TypeError, ValueError):
        return create, False
    fixed: dict[str, Any] = {}
    seeds: dict[str, tuple[str, bool]] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        required = p.default is p.empty
        if required and p.name in config:
            fixed[p.name] = config[p.name]
            continue
        kind = seed_kind(p.name, required)
        if kind is not None:
            seeds[p.name] = (kind, required)
        elif required:
            raise TaskError(f"create_inputs() requires argument {p.name!r}, which mk cannot supply", path=file,
                            hint="give it a default, name it `key` (a PRNG key is passed) or add it to CONFIG")
    return seeded_caller(create, fixed, seeds), bool(seeds)


def _split(out: Any, file: Path) -> list[Any]:
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return [out]
    if isinstance(out, (tuple, list)):
        return list(out)
    raise TaskError(f"create_inputs() must return an array or a tuple of arrays, got {type(out).__name__}", path=file, hint=_HINT)


def _statics(workload: Callable[..., Any], n_inputs: int, config: Mapping[str, Any], file: Path) -> tuple[StaticArg, ...]:
    try:
        params = list(inspect.signature(workload).parameters.values())
    except (TypeError, ValueError):
        return ()
    if any(p.kind is p.VAR_POSITIONAL for p in params[:n_inputs + 1]):
        return ()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < n_inputs:
        raise TaskError(f"workload() takes {len(positional)} positional inputs but create_inputs() returns {n_inputs}", path=file,
                        hint="make workload's leading parameters match create_inputs' outputs")
    out = []
    for p in params[n_inputs:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in config:
            out.append(StaticArg(p.name, config[p.name]))
        elif p.default is p.empty:
            raise TaskError(f"workload() parameter {p.name!r} is not an input and CONFIG has no {p.name!r}", path=file,
                            hint=f"add {p.name!r} to CONFIG or give it a default")
    return tuple(out)


def _tolerance(config: Mapping[str, Any], file: Path) -> Tolerance:
    both = config.get("tolerance")
    atol = config.get("atol", both if both is not None else DEFAULT_ATOL)
    rtol = config.get("rtol", both if both is not None else DEFAULT_RTOL)
    return Tolerance(atol=common.parse_tol(atol, "atol", file), rtol=common.parse_tol(rtol, "rtol", file))
