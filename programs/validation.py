"""Checks on sub-agent outputs, and the retry loop that feeds a rejection back.

A validator takes the raw prediction and returns a typed value or raises
:class:`InvalidOutput`, whose message says what to change; :func:`run_validated`
asks again (up to ``attempts`` times) with that message in the signature's
``previous_error`` input, then gives up with :class:`~mk.errors.AgentOutputError`.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

from mk.errors import AgentOutputError

log = logging.getLogger(__name__)

T = TypeVar("T")
ENTRY_NAMES = ("kernel", "workload", "computation")
_SCALAR = (int, float, str, bool)
_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_+-]*\s*\n(?P<body>.*?)\n\s*```\s*$", re.S)


class InvalidOutput(ValueError):
    """An answer that cannot be used; the message is shown to the LM on the retry."""


# --- the retry loop ---------------------------------------------------------
def run_validated(predictor: Callable[..., Any], validate: Callable[[Any], T], *, agent: str, attempts: int,
                  **inputs: Any) -> T:
    """Call ``predictor(**inputs, previous_error=...)`` until ``validate`` accepts the answer."""
    from dspy.utils.exceptions import AdapterParseError

    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    errors: list[str] = []
    feedback = ""
    for attempt in range(1, attempts + 1):
        try:
            return validate(predictor(**inputs, previous_error=feedback))
        except (InvalidOutput, AdapterParseError) as exc:
            reason = str(exc) if isinstance(exc, InvalidOutput) else f"the answer could not be parsed: {exc}"
            reason = reason[:4000]
            errors.append(reason)
            log.info("%s: answer %d of %d rejected: %s", agent, attempt, attempts, reason.splitlines()[0])
            feedback = f"Your answer (try {attempt} of {attempts}) was rejected: {reason}"
    raise AgentOutputError(
        f"the {agent} sub-agent gave no valid answer in {attempts} tries; last problem: {errors[-1]}",
        hint="raise the attempts, try a stronger model, or inspect the rejected answers with dspy.inspect_history()",
        agent=agent, attempts=attempts, errors=errors,
    )


def as_text(value: Any) -> str:
    """Render an input for a prompt: ``summary()``/``describe()`` objects, pydantic models, mappings."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    for name in ("summary", "describe"):
        method = getattr(value, name, None)
        if callable(method):
            out = method()
            return out if isinstance(out, str) else json.dumps(out, indent=1, default=str)
    if hasattr(value, "model_dump_json"):
        return value.model_dump_json(indent=1)
    if isinstance(value, Mapping):
        return "\n".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, Sequence):
        return "\n".join(as_text(v) for v in value)
    return str(value)


# --- code ----------------------------------------------------------------------
@dataclass(frozen=True)
class Implementation:
    """A validated candidate: its source, entry point and tuning space."""

    code: str
    entry: str
    config_space: dict[str, list[Any]] = field(default_factory=dict)


def strip_fences(code: str) -> str:
    match = _FENCE.match(code or "")
    return (match["body"] if match else code or "").strip() + "\n"


def check_code(code: str, *, n_positional: int | None = None, config_space: Mapping[str, Any] | None = None) -> Implementation:
    """Parse ``code`` and check it defines an entry point (``kernel``, or ``workload``/``computation``)
    taking ``n_positional`` positional arguments, and a valid ``CONFIG_SPACE``. A ``config_space``
    given separately is written into the code when the code has none."""
    code = strip_fences(code)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise InvalidOutput(f"the code does not parse: {exc.msg} at line {exc.lineno}: {(exc.text or '').strip()}") from None
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    entry = next((name for name in ENTRY_NAMES if name in defs or name in assigned), None)
    if entry is None:
        raise InvalidOutput("the code defines no `kernel` function at module level; define `def kernel(...)` "
                            "taking the reference's inputs and returning its outputs")
    fn = defs.get(entry)
    if fn is not None and n_positional is not None:
        _check_arity(fn, n_positional)
    in_code = _config_space_in(tree)
    space = in_code if in_code is not None else check_config_space(config_space or {})
    if fn is not None:
        _check_keywords(fn, space)
    if in_code is None and space:
        code = code.rstrip("\n") + f"\n\n\nCONFIG_SPACE = {space!r}\n"
    return Implementation(code, entry, space)


def check_config_space(space: Any, *, code: str | None = None, max_configs: int | None = None) -> dict[str, list[Any]]:
    """A dict of non-empty lists of scalars; keys must be keyword arguments of the code's entry point."""
    if not isinstance(space, Mapping):
        raise InvalidOutput(f"CONFIG_SPACE must be a dict of lists, got {type(space).__name__}")
    out: dict[str, list[Any]] = {}
    for key, values in space.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise InvalidOutput(f"CONFIG_SPACE key {key!r} is not a Python identifier")
        if not isinstance(values, (list, tuple)) or not values:
            raise InvalidOutput(f"CONFIG_SPACE[{key!r}] must be a non-empty list of values, got {values!r}")
        if not all(isinstance(v, _SCALAR) and not (isinstance(v, float) and not math.isfinite(v)) for v in values):
            raise InvalidOutput(f"CONFIG_SPACE[{key!r}] must hold numbers, strings or booleans, got {values!r}")
        out[key] = list(dict.fromkeys(values))
    if max_configs is not None:
        size = math.prod(len(v) for v in out.values())
        if size > max_configs:
            raise InvalidOutput(f"CONFIG_SPACE has {size} configurations; keep it at most {max_configs} "
                                "by dropping values or keys")
    if code is not None:
        impl = check_code(code)
        tree = ast.parse(impl.code)
        fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == impl.entry), None)
        if fn is not None:
            _check_keywords(fn, out)
    return out


def _config_space_in(tree: ast.Module) -> dict[str, list[Any]] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "CONFIG_SPACE" for t in targets) and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise InvalidOutput("CONFIG_SPACE must be a literal dict of lists (no names or calls), "
                                    "e.g. {'block_m': [128, 256]}") from None
            return check_config_space(value)
    return None


def _check_arity(fn: ast.FunctionDef | ast.AsyncFunctionDef, n: int) -> None:
    a = fn.args
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    if (positional < n and a.vararg is None) or required > n:
        raise InvalidOutput(f"`{fn.name}` must take the reference's {n} positional argument(s); it takes "
                            f"{required} required of {positional}{' plus *args' if a.vararg else ''}")


def _check_keywords(fn: ast.FunctionDef | ast.AsyncFunctionDef, space: Mapping[str, Any]) -> None:
    if fn.args.kwarg is not None:
        return
    accepted = {x.arg for x in fn.args.args + fn.args.kwonlyargs}
    missing = [k for k in space if k not in accepted]
    if missing:
        raise InvalidOutput(f"CONFIG_SPACE keys {missing} are not keyword arguments of `{fn.name}`; "
                            "add them as keyword parameters with defaults or drop them")


def positional_count(task: Any) -> int:
    """How many positional arguments the task's reference (and every candidate) takes."""
    return len(task.args) + (0 if task.static_as_kwargs else len(task.static))


# --- test cases -----------------------------------------------------------------
def check_test_cases(cases: Sequence[Any], task: Any, *, max_elements: int = 1 << 22, max_dim: int = 1 << 16,
                     trace: bool = True) -> list[Any]:
    """Each case has one shape and dtype per input, with the task's ranks and dtypes, positive
    bounded sizes, and shapes the reference accepts (checked with ``jax.eval_shape``)."""
    if not cases:
        raise InvalidOutput("no test cases; propose at least one")
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise InvalidOutput(f"test case names must be unique, got {names}")
    native = any(a.init.kind == "native" for a in task.args)
    scale_shapes = [[list(s) for s in task.shapes(n)] for n in task.scales]
    for case in cases:
        where = f"test case {case.name!r}"
        if len(case.shapes) != len(task.args) or len(case.dtypes) != len(task.args):
            raise InvalidOutput(f"{where}: give one shape and one dtype for each of the {len(task.args)} inputs "
                                f"({', '.join(a.name for a in task.args)}); got {len(case.shapes)} shapes, {len(case.dtypes)} dtypes")
        for arg, shape, dtype in zip(task.args, case.shapes, case.dtypes):
            if len(shape) != len(arg.shape):
                raise InvalidOutput(f"{where}: input {arg.name!r} has rank {len(arg.shape)}, got shape {shape}")
            if dtype != arg.dtype:
                raise InvalidOutput(f"{where}: input {arg.name!r} has dtype {arg.dtype}, got {dtype}")
            if any(d <= 0 or d > max_dim for d in shape):
                raise InvalidOutput(f"{where}: input {arg.name!r} shape {shape} needs sizes between 1 and {max_dim}")
            if math.prod(shape) > max_elements:
                raise InvalidOutput(f"{where}: input {arg.name!r} shape {shape} has {math.prod(shape)} elements; "
                                    f"keep each input at most {max_elements}")
        if native and [list(s) for s in case.shapes] not in scale_shapes:
            raise InvalidOutput(f"{where}: this task draws some inputs from its own generator, so shapes must be "
                                f"one of the task's scales: {scale_shapes}; vary distributions and edge cases instead")
        if trace:
            _check_reference_accepts(task, case, where)
    return list(cases)


def _check_reference_accepts(task: Any, case: Any, where: str) -> None:
    import jax

    from mk.task import np_dtype

    structs = [jax.ShapeDtypeStruct(tuple(s), np_dtype(d)) for s, d in zip(case.shapes, case.dtypes)]
    fn = task.bind(task.reference)
    try:
        jax.eval_shape(lambda *xs: fn(*xs), *structs)
    except Exception as exc:  # noqa: BLE001 - any rejection by the reference is the LM's to fix
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidOutput(f"{where}: the reference rejects shapes {case.shapes}: {type(exc).__name__}: {first}"[:800]) from None
