"""Softmax over the last axis of attention-score-like rows, f32.

An mk task module: `mk optimize examples/softmax.py`.
"""

import jax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance


def softmax(x):
    return jax.nn.softmax(x, axis=-1)


TASK = Task(
    name="softmax",
    reference=softmax,
    args=(ArgSpec("x", ("rows", "cols"), "float32", Init("normal", std=2.0)),),
    tolerance=Tolerance(atol=1e-5, rtol=1e-4),
    scales={
        "full": Scale("full", dims={"rows": 16384, "cols": 8192}),
        "ci": Scale("ci", dims={"rows": 128, "cols": 256}),
    },
    description="Numerically stable softmax (max-subtracted) over the last axis.",
)
