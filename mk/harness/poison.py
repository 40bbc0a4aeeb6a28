"""Finite garbage in memory a kernel has not written yet, for the TPU interpreter's third check run.

Pallas's TPU interpreter fills the memory it allocates (scratch buffers, output blocks, block padding) with NaN or
zeros (``InterpretParams.uninitialized_memory``). Both are recognisable: a kernel that reads memory it never wrote and
behaves honestly only when it finds NaN or zero passes every interpreted check, and on a chip, where that memory
holds whatever the last kernel left (finite, varied), takes its other path. :func:`install` adds a third fill,
:data:`GARBAGE`: random finite values per element, drawn from a secret seed the judge sends (a constant of the same
draw where the interpreter pads with one value), so a kernel cannot tell it from stale memory by a value or by being
uniform.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

#: the ``uninitialized_memory`` value that selects the garbage fill (not one upstream knows)
GARBAGE = "mk-garbage"

_lock = threading.Lock()
_draw: dict[str, Any] = {"rng": None, "scale": 1.0, "fill": 1.0}


def seed(value: int) -> None:
    """The secret seed the garbage comes from (the judge's; set in the tracer before the check programs are built)."""
    rng = np.random.default_rng(int(value))
    with _lock:
        _draw.update(rng=rng, scale=float(10.0 ** rng.uniform(0.0, 2.0)), fill=0.0)
        _draw["fill"] = float(rng.uniform(-1.0, 1.0) * _draw["scale"]) or 1.0


def _rng() -> np.random.Generator:
    if _draw["rng"] is None:
        seed(int.from_bytes(np.random.SeedSequence().entropy.to_bytes(16, "little")[:4], "little"))
    return _draw["rng"]


def value(dtype: Any) -> Any:
    """One finite garbage value of ``dtype`` (where the interpreter fills with a single value: block padding)."""
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.bool_):
        return True
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return int(np.clip(int(_draw["fill"] * 1000), info.min, info.max))
    return _draw["fill"]


def array(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random finite garbage of ``shape`` and ``dtype``: floats uniform in +-scale (a secret 1 to 100), integers in
    +-32768 (clipped to the type), booleans either way."""
    dt = np.dtype(dtype)
    with _lock:
        rng = _rng()
        if np.issubdtype(dt, np.bool_):
            return rng.random(shape) < 0.5
        if np.issubdtype(dt, np.integer):
            info = np.iinfo(dt)
            return np.clip(rng.integers(-32768, 32768, size=shape), info.min, info.max).astype(dt)
        return (rng.uniform(-1.0, 1.0, size=shape) * _draw["scale"]).astype(np.float32).astype(dt)


def install() -> bool:
    """Teach the TPU interpreter the :data:`GARBAGE` fill (idempotent); False where its fill functions are not the
    ones this wraps (the garbage run then fails loudly rather than pass as a NaN run)."""
    try:
        from jax._src.pallas.mosaic.interpret import utils
    except ImportError:
        return False
    if getattr(utils.get_uninitialized_value, "_mk_garbage", False):
        return True
    if not (callable(getattr(utils, "get_uninitialized_value", None)) and callable(getattr(utils, "get_uninitialized_array", None))):
        return False
    upstream_value, upstream_array = utils.get_uninitialized_value, utils.get_uninitialized_array

    def get_uninitialized_value(dtype: Any, uninitialized_memory: Any) -> Any:
        if uninitialized_memory == GARBAGE:
            return value(dtype)
        return upstream_value(dtype, uninitialized_memory)

    def get_uninitialized_array(shape: Any, dtype: Any, uninitialized_memory: Any) -> Any:
        if uninitialized_memory == GARBAGE:
            import jax.numpy as jnp

            return jnp.asarray(array(tuple(int(s) for s in shape), dtype))
        return upstream_array(shape, dtype, uninitialized_memory)

    get_uninitialized_value._mk_garbage = True  # type: ignore[attr-defined]
    get_uninitialized_array._mk_garbage = True  # type: ignore[attr-defined]
    utils.get_uninitialized_value, utils.get_uninitialized_array = get_uninitialized_value, get_uninitialized_array
    return True


def installed() -> list[tuple[Any, str]]:
    """(module, name) of the functions :func:`install` put in place (for the tracer's tripwire)."""
    from jax._src.pallas.mosaic.interpret import utils

    return [(utils, "get_uninitialized_value"), (utils, "get_uninitialized_array")]
