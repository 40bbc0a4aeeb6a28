"""Trace a task's reference at every scale it has (abstract shapes, nothing runs).

Which constants of a trace stand for the inputs' sizes or the static values
(``sum / 256.0`` is a mean over a 256-wide axis, ``+ 1e-05`` adds ``eps``) is
found by :mod:`mk.author.probe`, which traces the reference again at sizes and
static values of its own choosing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mk.task import Task

@dataclass
class Traced:
    scale: str
    jaxpr: Any  # ClosedJaxpr
    shapes: list[tuple[int, ...]]
    probes: Any = field(default=None, repr=False)  # mk.author.probe.Probes of this trace, once made


def trace_scales(task: Task) -> list[Traced]:
    import jax

    out = []
    for name in task.scales:
        closed = jax.make_jaxpr(task.bind(task.reference, name))(*task.arg_structs(name))
        out.append(Traced(name, closed, task.shapes(name)))
    return out


def smallest_scale(traced: list[Traced]) -> str:
    """The scale with the fewest input elements: where a recogniser runs the reference on a CPU to probe it (a
    task's first scale may be ``full``, gigabytes on a laptop)."""
    import math

    return min(traced, key=lambda t: sum(math.prod(s) for s in t.shapes)).scale
