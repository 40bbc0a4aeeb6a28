"""Fills for memory a kernel has not written yet, for the TPU interpreter's check runs.

Pallas's TPU interpreter fills the memory it allocates (scratch buffers, output blocks, block padding) with NaN or
zeros (``InterpretParams.uninitialized_memory``). A kernel that reads memory it never wrote and behaves honestly
only when it finds the judge's fill passes every interpreted check, and on a chip, where that memory holds whatever
the last kernel left, takes its other path. :func:`install` adds two fills of mk's own, :data:`GARBAGE` (the
``garbage`` run) and :data:`GARBAGE_SHUFFLED` (the ``shuffled`` run), each from a different *family* drawn from the
judge's secret seed: ``uniform`` (random values in +-scale), ``normal`` (as stale activations are), ``bits``
(random bit patterns, made finite: integers over their whole range) or ``zeros`` (fresh memory), each with a secret
scale, in scratch, unwritten output blocks and the padding of partial blocks alike (round 12: a red team's kernel was
honest only where a partial block's padding was one repeated value, as upstream pads). Both runs must match the
reference, so a kernel that recognises one family (round 12, a red team: "honest only when an int32 scratch holds
values within +-32768", "only when a float scratch looks uniform") disagrees with itself in the other.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np

#: the ``uninitialized_memory`` values of mk's fills (not ones upstream knows): the garbage run's, the shuffled run's
GARBAGE = "mk-garbage"
GARBAGE_SHUFFLED = "mk-garbage-shuffled"
FILLS = (GARBAGE, GARBAGE_SHUFFLED)
#: what a fill's values look like; the two fills of one judgement never share one
FAMILIES = ("uniform", "normal", "bits", "zeros")

_lock = threading.Lock()
_draws: dict[str, dict[str, Any]] = {}
#: (shape, dtype) -> digests of the arrays the fills handed out under the current seed (:func:`is_fill`)
_handed: dict[tuple[tuple[int, ...], str], set[bytes]] = {}
_picks: list[np.random.Generator] = []  # the stream of :func:`pick` (one, from the seed)
#: (padded shape, dtype) -> (the shape of an input a fill padded to it, the digest of the fill in its padding)
_padded: dict[tuple[tuple[int, ...], str], list[tuple[tuple[int, ...], bytes]]] = {}


def seed(value: int) -> None:
    """The secret seed the fills come from (the judge's; set in the tracer before the check programs are built):
    two different families, one per fill, each with its own scale and stream."""
    rng = np.random.default_rng(int(value))
    families = rng.choice(len(FAMILIES), size=len(FILLS), replace=False)
    with _lock:
        _handed.clear()
        _padded.clear()
        _picks[:] = [np.random.default_rng(int(rng.integers(2**63)))]
        for name, family in zip(FILLS, families):
            sub = np.random.default_rng(int(rng.integers(2**63)))
            scale = float(10.0 ** sub.uniform(0.0, 2.0))
            draw = {"rng": sub, "family": FAMILIES[int(family)], "scale": scale}
            draw["fill"] = float(_floats(sub, draw["family"], scale, (1,), np.dtype(np.float32))[0])
            _draws[name] = draw


def pick(n: int) -> int:
    """An index below ``n`` from the secret seed's stream (mk.harness.dma_order: which pending DMA completes)."""
    _draw(GARBAGE)  # seeded, if nothing seeded yet
    with _lock:
        return int(_picks[0].integers(n))


def family(fill: str = GARBAGE) -> str:
    """The family ``fill`` draws from under the current seed."""
    return _draw(fill)["family"]


def _draw(fill: str) -> dict[str, Any]:
    if fill not in _draws:  # no seed from the judge (a direct use): a random one
        seed(int(np.random.SeedSequence().generate_state(1)[0]))
    return _draws[fill]


def _floats(rng: np.random.Generator, family: str, scale: float, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    if family == "zeros":
        return np.zeros(shape, dt)
    if family == "normal":
        return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dt)
    if family == "bits":
        out = rng.integers(0, 256, size=(*shape, dt.itemsize), dtype=np.uint8).view(dt).reshape(shape)
        bad = ~np.isfinite(out.astype(np.float32))
        out[bad] = (rng.uniform(-1.0, 1.0, int(bad.sum())) * scale).astype(dt)
        return out
    return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32).astype(dt)


def _ints(rng: np.random.Generator, family: str, scale: float, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    info = np.iinfo(dt)
    if family == "zeros":
        return np.zeros(shape, dt)
    if family == "bits":
        return rng.integers(0, 256, size=(*shape, dt.itemsize), dtype=np.uint8).view(dt).reshape(shape)
    if family == "normal" and dt.itemsize in (2, 4, 8):  # stale activations read as integers: their float bits
        floats = np.dtype({2: np.float16, 4: np.float32, 8: np.float64}[dt.itemsize])
        return (rng.standard_normal(shape) * scale).astype(floats).view(dt)
    if family == "normal":  # one byte: no float of that size
        return rng.integers(0, 256, size=(*shape, 1), dtype=np.uint8).view(dt).reshape(shape)
    return np.clip(rng.integers(-32768, 32768, size=shape), info.min, info.max).astype(dt)


def value(dtype: Any, fill: str = GARBAGE) -> Any:
    """One value of ``dtype`` from ``fill`` (where the interpreter fills with a single value: block padding)."""
    dt = np.dtype(dtype)
    draw = _draw(fill)
    if np.issubdtype(dt, np.bool_):
        return draw["family"] != "zeros"
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return int(np.clip(int(draw["fill"] * 1000), info.min, info.max))
    return draw["fill"]


def array(shape: tuple[int, ...], dtype: Any, fill: str = GARBAGE) -> np.ndarray:
    """Values of ``shape`` and ``dtype`` from ``fill``'s family (finite; booleans either way unless zeros),
    remembered as a fill's (:func:`is_fill`)."""
    dt = np.dtype(dtype)
    _draw(fill)  # seeded, if nothing seeded yet (seed takes the lock)
    with _lock:
        draw = _draw(fill)
        rng, fam, scale = draw["rng"], draw["family"], draw["scale"]
        if np.issubdtype(dt, np.bool_):
            out = np.zeros(shape, bool) if fam == "zeros" else rng.random(shape) < 0.5
        elif np.issubdtype(dt, np.integer):
            out = _ints(rng, fam, scale, shape, dt)
        else:
            out = _floats(rng, fam, scale, shape, dt)
        _remember(out, fam)
        return out


def _digest(value: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).digest()


def _remember(value: np.ndarray, family: str) -> None:
    """Remember ``value`` as one a fill handed out (the caller holds the lock): not a zero fill, and not one with
    fewer than 32 random bits, which a real input could equal."""
    bits = value.size if value.dtype == np.bool_ else value.size * value.dtype.itemsize * 8
    if family != "zeros" and bits >= 32:
        _handed.setdefault((tuple(value.shape), value.dtype.name), set()).add(_digest(value))


def padding_mask(shape: tuple[int, ...], valid: tuple[int, ...]) -> np.ndarray:
    """True where an array of ``shape`` lies outside ``valid`` (the padding of an input padded to ``shape``)."""
    inside = np.ones(shape, bool)
    inside[tuple(slice(0, v) for v in valid)] = False
    return inside


def valid_shape(content: np.ndarray) -> tuple[int, ...] | None:
    """The shape of the input ``content`` holds before a fill padded it: only where its padding is exactly the fill
    a pad handed out (a real input of that shape, unpadded, never matches random fill), else None."""
    with _lock:
        candidates = list(_padded.get((tuple(content.shape), content.dtype.name), ()))
    for valid, digest in candidates:
        if _digest(content[padding_mask(content.shape, valid)]) == digest:
            return valid
    return None


def is_fill(value: Any) -> bool:
    """Whether ``value`` is an array one of mk's fills handed out under the current seed (memory never written)."""
    try:
        value = np.asarray(value)
    except Exception:  # a traced value (an input of the interpreted program): not a fill's
        return False
    with _lock:
        seen = _handed.get((tuple(value.shape), value.dtype.name))
    return bool(seen) and _digest(value) in seen


def install() -> bool:
    """Teach the TPU interpreter mk's fills (idempotent); False where its fill functions are not the ones this wraps
    (a run with mk's fill then fails loudly rather than pass as a NaN run)."""
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
        if uninitialized_memory in FILLS:
            return value(dtype, uninitialized_memory)
        return upstream_value(dtype, uninitialized_memory)

    def get_uninitialized_array(shape: Any, dtype: Any, uninitialized_memory: Any) -> Any:
        if uninitialized_memory in FILLS:
            import jax.numpy as jnp

            return jnp.asarray(array(tuple(int(s) for s in shape), dtype, uninitialized_memory))
        return upstream_array(shape, dtype, uninitialized_memory)

    upstream_pad = utils.pad_to_block_dimension

    def pad_to_block_dimension(value: Any, block_shape: Any, uninitialized_memory: Any) -> Any:
        if uninitialized_memory not in FILLS:
            return upstream_pad(value, block_shape, uninitialized_memory)
        padded = tuple(((v - 1) // b + 1) * b for v, b in zip(value.shape, block_shape))
        if padded == tuple(value.shape):
            return value
        import jax.numpy as jnp

        filler_values = array(padded, value.dtype, uninitialized_memory)  # varied, as a chip's stale memory
        filler = jnp.asarray(filler_values)
        padded_value = filler.at[tuple(slice(0, d) for d in value.shape)].set(value)
        if is_fill(value):  # an output's HBM buffer, padded: still never written
            with _lock:
                _remember(np.asarray(padded_value), _draw(uninitialized_memory)["family"])
        else:  # an input: which of its blocks' rows are padding (mk.harness.races: a chip's slot keeps them)
            pad = filler_values[padding_mask(padded, tuple(value.shape))]
            bits = pad.size if pad.dtype == np.bool_ else pad.size * pad.dtype.itemsize * 8
            if _draw(uninitialized_memory)["family"] != "zeros" and bits >= 32:  # zeros: a real input's rows could be
                with _lock:
                    _padded.setdefault((padded, np.dtype(value.dtype).name), []).append((tuple(value.shape), _digest(pad)))
        return padded_value

    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret

    upstream_padding = tpu_interpret._get_with_padding

    def _get_with_padding(x: Any, uninitialized_memory: Any) -> Any:
        if uninitialized_memory not in FILLS:
            return upstream_padding(x, uninitialized_memory)
        result = np.array(upstream_padding(x, "zero"))  # the padded shape, as upstream computes it
        result[...] = array(result.shape, x.dtype, uninitialized_memory)
        result[tuple(slice(0, d) for d in x.shape)] = x
        return result

    for fn in (get_uninitialized_value, get_uninitialized_array, pad_to_block_dimension, _get_with_padding):
        fn._mk_garbage = True  # type: ignore[attr-defined]
    utils.get_uninitialized_value, utils.get_uninitialized_array = get_uninitialized_value, get_uninitialized_array
    utils.pad_to_block_dimension, tpu_interpret._get_with_padding = pad_to_block_dimension, _get_with_padding
    return True


def installed() -> list[tuple[Any, str]]:
    """(module, name) of the functions :func:`install` put in place (for the tracer's tripwire)."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret, utils

    return [(utils, "get_uninitialized_value"), (utils, "get_uninitialized_array"), (utils, "pad_to_block_dimension"),
            (tpu_interpret, "_get_with_padding")]
