"""The plain-JAX reference of :mod:`mk.kernels.rowwise`: the body applied to all the rows at once (one block)."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax.numpy as jnp


def rowwise(body: Callable[..., tuple], inputs: Sequence[Any], *, row_inputs: Sequence[bool], lead: int) -> list[Any]:
    """What :func:`mk.kernels.rowwise.tpu.rowwise_tpu` computes: ``body`` on every row input collapsed to
    (rows, trailing...) (a (rows,) vector when it has no trailing axes) and the parameters whole (0-d ones as
    scalars); each output reshaped to the rows' leading shape followed by its trailing axes."""
    rows = next(a for a, r in zip(inputs, row_inputs) if r).shape[:lead]
    n = math.prod(rows)
    vals = [jnp.reshape(a, (n,) + a.shape[lead:]) if r else a for a, r in zip(inputs, row_inputs)]
    outs = body(*vals)
    return [jnp.broadcast_to(o.reshape((o.shape[0] if o.ndim else 1,) + o.shape[1:]), (n,) + o.shape[1:])
            .reshape(rows + o.shape[1:]) for o in outs]
