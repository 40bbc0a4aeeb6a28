"""MaxKernel-style task directories.

Layout::

    my_task/
        reference.py       # get_inputs() -> (dynamic_args, static_args)
                           # computation(*dynamic_args, *static_args)
        kernel_task.yaml   # atol, rtol (a number or one per output); optional
                           # name, description, reference_file, and (an mk
                           # extension) inputs / static_args, see below

``static_args`` may also be a dict, in which case the statics are passed as
keywords (``computation(*dynamic, **static)``). Input shapes are read with
``jax.eval_shape`` of ``get_inputs`` (nothing is allocated); floating inputs
are assumed N(0, 1) for the extra distributions of the frozen suite, integer
and boolean inputs always come from ``get_inputs`` itself. Such a task has one
scale, ``full``: the shapes ``get_inputs`` builds. Without ``atol``/``rtol``
the defaults of :func:`mk.loaders.common.default_tolerance` apply.

``eval_shape`` cannot stop a generator that draws with numpy from allocating.
Such tasks (and any task, to skip tracing) can declare their inputs in the
yaml: ``inputs: [{name: x, shape: [8, 4096], dtype: bfloat16, init: normal}]``
and ``static_args: [{name: eps, value: 1.0e-5}]`` (or a plain list of values).
Then ``get_inputs`` runs only at evaluation time, where
:meth:`Task.make_inputs` checks its shapes against the declaration.

When ``get_inputs`` takes a seed or a PRNG key (a parameter named ``seed``,
``key``, ``rng`` and the like: :func:`mk.loaders.jaxbench.seed_kind`), each
case calls it with the case's seed (``jax.random.PRNGKey(seed)`` for a key),
so every case draws fresh integer inputs too; seed 0 is the call mk always
made (``PRNGKey(0)`` / ``0`` for a required parameter, the default for one
that has it). Otherwise every case gets the inputs of ``get_inputs()``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from mk.errors import TaskError
from mk.loaders import common
from mk.loaders.jaxbench import seed_kind, seeded_caller
from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance, np_dtype

log = logging.getLogger(__name__)

YAML_NAME = "kernel_task.yaml"
REFERENCE_NAME = "reference.py"
KIND = "maxkernel"
_HINT = f"a MaxKernel task directory holds {REFERENCE_NAME} (get_inputs() and computation(...)) and {YAML_NAME} (atol, rtol)"


def is_task_dir(path: Path) -> bool:
    return path.is_dir() and ((path / REFERENCE_NAME).is_file() or (path / YAML_NAME).is_file())


def read_meta(folder: Path) -> dict[str, Any]:
    """The task's ``kernel_task.yaml`` as a dict ({} when there is none)."""
    path = folder / YAML_NAME
    if not path.is_file():
        return {}
    import yaml

    try:
        meta = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read {YAML_NAME}: {' '.join(str(exc).split())}", path=path, hint="fix the YAML syntax") from exc
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise TaskError(f"{YAML_NAME} must be a mapping (key: value lines), got {type(meta).__name__}", path=path)
    return dict(meta)


def load(path: Path, task_id: str | None = None) -> Task:
    folder = path if path.is_dir() else path.parent
    meta = read_meta(folder)
    ref_file = folder / str(meta.get("reference_file", REFERENCE_NAME))
    if not ref_file.is_file():
        raise TaskError(f"missing {ref_file.name}", path=folder, hint=_HINT)
    module = common.import_file(ref_file, KIND)
    get_inputs, seeded = _seeded(common.require_function(module, "get_inputs", ref_file, "return (dynamic_args, static_args)"))
    computation = common.require_function(module, "computation", ref_file, "computation(*dynamic_args, *static_args)")

    def split(out: Any) -> tuple[Sequence[Any], Any]:
        return _split(out, ref_file)

    params, _ = common.param_names(computation)
    if meta.get("inputs") is not None:  # declared in the yaml: get_inputs is not run at load time
        import jax

        args = _declared_inputs(meta["inputs"], folder / YAML_NAME)
        structs = [jax.ShapeDtypeStruct(a.shape, np_dtype(a.dtype)) for a in args]
        static = _declared_static(meta.get("static_args") or [], folder / YAML_NAME)
    else:
        structs, static = common.trace_generator(get_inputs, split, ref_file, "get_inputs()")
        names = common.input_names(computation, len(structs))
        args = common.arg_specs(structs, names)
    as_kwargs = isinstance(static, Mapping)
    if as_kwargs:
        statics = tuple(StaticArg(str(k), v) for k, v in static.items())
    elif static and isinstance(static[0], StaticArg):
        statics = tuple(static)
    else:
        statics = tuple(
            StaticArg(params[len(structs) + i] if len(structs) + i < len(params) else f"static{i}", v) for i, v in enumerate(static)
        )
    tolerance = _tolerance(meta, [a.dtype for a in args], folder / YAML_NAME)
    static_values = {a.name: a.value for a in statics} if as_kwargs else [a.value for a in statics]
    common.check_tolerance_outputs(tolerance, computation, structs, static_values, folder / YAML_NAME)

    def draw(scale: str, seed: int) -> tuple[list[Any], list[Any]]:
        if scale != "full":
            raise TaskError(f"a MaxKernel task has only the 'full' scale, not {scale!r}", path=folder)
        dynamic, st = _split(get_inputs(seed), ref_file)
        return common.host_inputs(dynamic, args, ref_file), list(st.values()) if isinstance(st, Mapping) else list(st)

    native_inputs = common.native_generator(draw, seeded)  # each case's seed reaches get_inputs when it takes one

    name = str(meta.get("name") or meta.get("task_name") or folder.name)
    return Task(
        name=name,
        reference=computation,
        args=args,
        scales={"full": Scale("full")},
        static=statics,
        tolerance=tolerance,
        description=str(meta.get("description") or common.doc_summary(module)),
        source=folder,
        kind=KIND,
        static_as_kwargs=as_kwargs,
        native_inputs=native_inputs,
        locator=common.locator(KIND, folder, task_id or name),
    )


def _seeded(get_inputs: Any) -> tuple[Any, bool]:
    """``get_inputs`` as ``call(seed=0)``, and whether the seed reaches it (a seed or PRNG-key parameter);
    its other parameters are left to their defaults."""
    import inspect

    try:
        params = list(inspect.signature(get_inputs).parameters.values())
    except (TypeError, ValueError):
        return (lambda seed=0: get_inputs()), False
    seeds = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind = seed_kind(p.name, p.default is p.empty)
        if kind is not None:
            seeds[p.name] = (kind, p.default is p.empty)
    return seeded_caller(get_inputs, {}, seeds), bool(seeds)


def _declared_inputs(value: Any, path: Path) -> tuple[ArgSpec, ...]:
    """``inputs:`` in the yaml: a list of ``{name, shape, dtype, init?}``."""
    if not isinstance(value, list) or not value:
        raise TaskError("`inputs` must be a non-empty list of {name, shape, dtype}", path=path)
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or "shape" not in item or "dtype" not in item:
            raise TaskError(f"`inputs` entry {i} must have `shape` and `dtype` (and a `name`), got {item!r}", path=path)
        try:
            shape = tuple(int(d) for d in item["shape"])
            dtype = str(np_dtype(str(item["dtype"])).name)
            init = Init.parse(item["init"], dtype) if item.get("init") is not None else common.default_init(dtype)
        except (TypeError, ValueError, TaskError) as exc:
            raise TaskError(f"`inputs` entry {i} is malformed: {exc}", path=path) from exc
        out.append(ArgSpec(str(item.get("name") or f"arg{i}"), shape, dtype, init))
    return tuple(out)


def _declared_static(value: Any, path: Path) -> list[Any]:
    """``static_args:`` in the yaml: a list of values or of ``{name, value}``."""
    if not isinstance(value, list):
        raise TaskError("`static_args` must be a list of values or of {name, value}", path=path)
    if all(isinstance(v, Mapping) and "value" in v for v in value) and value:
        return [StaticArg(str(v.get("name") or f"static{i}"), v["value"]) for i, v in enumerate(value)]
    return list(value)


def _split(out: Any, path: Path) -> tuple[Sequence[Any], Any]:
    """Validate ``get_inputs()``'s return value: ``(dynamic_args, static_args)``."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = f"a {type(out).__name__}" + (f" of {len(out)} items" if isinstance(out, (tuple, list)) else "")
        raise TaskError(f"get_inputs() must return (dynamic_args, static_args), got {got}", path=path,
                        hint="return a pair: a list of input arrays and a list (or dict) of static Python values, e.g. `return [x, w], [eps]`")
    dynamic, static = out
    if not isinstance(dynamic, (tuple, list)):
        raise TaskError(f"get_inputs()[0] must be a list of input arrays, got {type(dynamic).__name__}", path=path,
                        hint="return a pair: `return [x, w], [eps]` (an empty list when there are no static args)")
    if static is None:
        static = ()
    if not isinstance(static, (tuple, list, Mapping)):
        raise TaskError(f"get_inputs()[1] must be a list (or dict) of static values, got {type(static).__name__}", path=path,
                        hint="return a pair: `return [x, w], [eps]` (an empty list when there are no static args)")
    return dynamic, static


def _tolerance(meta: Mapping[str, Any], dtypes: list[str], path: Path) -> Tolerance:
    source = meta.get("tolerance") if isinstance(meta.get("tolerance"), Mapping) else meta
    default = common.default_tolerance(dtypes)
    if "atol" not in source and "rtol" not in source:
        log.info("%s: no atol/rtol given; using the defaults %s/%s", path, default.atol, default.rtol)
    atol = common.parse_tol(source["atol"], "atol", path) if "atol" in source else default.atol
    rtol = common.parse_tol(source["rtol"], "rtol", path) if "rtol" in source else default.rtol
    return Tolerance(atol=atol, rtol=rtol)
