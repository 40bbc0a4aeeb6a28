"""Arrays and static values as files: what the judge, the runner and the tracer exchange.

Arrays are ``.npy`` files named ``<prefix>_<i>__<dtype>.npy`` (dtypes numpy
cannot name, bfloat16 and fp8, are stored as raw unsigned ints and viewed
back); nothing is ever unpickled. Static values travel as tagged JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

def save_arrays(folder: Path, prefix: str, arrays: Sequence[Any], indices: Sequence[int] | None = None) -> None:
    """Write ``prefix_<i>__<dtype>.npy`` files; dtypes numpy cannot name (bfloat16, fp8) are stored as raw unsigned ints."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, a in zip(indices if indices is not None else range(len(arrays)), arrays):
        a = np.asarray(a)
        raw = a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" else a
        np.save(folder / f"{prefix}_{i}__{a.dtype.name}.npy", raw, allow_pickle=False)


def load_indexed(folder: Path, prefix: str) -> dict[int, np.ndarray]:
    """Read the files :func:`save_arrays` wrote, keyed by index (never unpickling)."""
    out: dict[int, np.ndarray] = {}
    for f in folder.glob(f"{prefix}_*__*.npy"):
        if f.is_symlink() or not f.is_file():  # a hostile work dir may hold links or fifos
            raise ValueError(f"{f.name} is not a regular file")
        head, _, dtype = f.stem.rpartition("__")
        idx = head[len(prefix) + 1 :]
        if not idx.isdigit():
            raise ValueError(f"unexpected array file {f.name}")
        a = np.load(f, allow_pickle=False)
        want = dtype_of(dtype)
        if a.dtype != want:
            if a.dtype.kind != "u" or a.dtype.itemsize != want.itemsize:
                raise ValueError(f"{f.name}: stored dtype {a.dtype} does not match {dtype}")
            a = a.view(want)
        out[int(idx)] = a
    return out


def load_arrays(folder: Path, prefix: str) -> list[np.ndarray]:
    got = load_indexed(folder, prefix)
    if sorted(got) != list(range(len(got))):
        raise ValueError(f"{folder}: {prefix} files are not numbered 0..{len(got) - 1}")
    return [got[i] for i in range(len(got))]


def dtype_of(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        if not hasattr(ml_dtypes, name):
            raise ValueError(f"unknown dtype {name!r}") from None
        return np.dtype(getattr(ml_dtypes, name))


# --- static values --------------------------------------------------------------
def encode_static(value: Any) -> Any:
    """JSON form of a static argument (tuples and dtypes tagged); raises TypeError otherwise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode_static(v) for v in value]}
    if isinstance(value, list):
        return [encode_static(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: encode_static(v) for k, v in value.items()}}
    try:
        return {"__dtype__": np.dtype(value).name}
    except TypeError:
        raise TypeError(f"static value {value!r} of type {type(value).__name__} cannot be sent to the sandbox") from None


def decode_static(value: Any) -> Any:
    if isinstance(value, list):
        return [decode_static(v) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(decode_static(v) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: decode_static(v) for k, v in value["__dict__"].items()}
        if "__dtype__" in value:
            import jax.numpy as jnp

            return getattr(jnp, value["__dtype__"])
    return value
