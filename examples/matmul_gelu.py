"""A linear layer with a GELU epilogue: gelu(x @ w.T + b), f32.

An mk task module: `mk optimize examples/matmul_gelu.py`.
"""

import jax

from mk.task import ArgSpec, Init, Scale, Task, Tolerance


def linear_gelu(x, w, b):
    return jax.nn.gelu(x @ w.T + b)


TASK = Task(
    name="matmul_gelu",
    reference=linear_gelu,
    args=(
        ArgSpec("x", ("M", "K"), "float32", Init("normal")),
        ArgSpec("w", ("N", "K"), "float32", Init("normal", std=0.05)),
        ArgSpec("b", ("N",), "float32", Init("normal", std=0.1)),
    ),
    tolerance=Tolerance(atol=1e-3, rtol=1e-3),
    scales={
        "full": Scale("full", dims={"M": 4096, "K": 4096, "N": 4096}),
        "ci": Scale("ci", dims={"M": 64, "K": 256, "N": 256}),
    },
    description="Dense layer with bias and tanh-approximated GELU.",
)
