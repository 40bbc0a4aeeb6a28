"""9p_SwiGLU_MLP.

SwiGLU feed-forward block (gate, up, down projections) in bf16, no bias.
Source: Llama-3.1-70B SwiGLU MLP (JaxBench production task). mk's own implementation, written from the
published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "SwiGLU feed-forward. x is (B=2,S=4096,E=8192) and the MLP dim is M=28672, all bf16. g = x @ "
    "gate_kernel (bf16 result); a = silu(g) = g*sigmoid(g) in bf16; u = x @ up_kernel (bf16); h = a*u "
    "(bf16); out = h @ down_kernel. Every matmul is jnp.dot with default precision and a bf16 result. "
    "Output (2,4096,8192) bf16. There is no bias."
)

GFLOP = 11546.0
MIN_BYTES = 1677721600


def swiglu_mlp(x, gate_kernel, up_kernel, down_kernel):
    """x (B,S,E); gate/up (E,M); down (M,E); all bf16."""
    g = jnp.dot(x, gate_kernel)
    a = jax.nn.silu(g)
    u = jnp.dot(x, up_kernel)
    return jnp.dot(a * u, down_kernel)


TASK = Task(
    name="9p_SwiGLU_MLP",
    reference=swiglu_mlp,
    args=(
        ArgSpec("x", ("B", "S", "E"), "bfloat16", Init("normal")),
        ArgSpec("gate_kernel", ("E", "M"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("up_kernel", ("E", "M"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("down_kernel", ("M", "E"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.1, rtol=0.1),
    scales={
        "full": Scale("full", dims={"B": 2, "S": 4096, "E": 8192, "M": 28672}),
        "ci": Scale("ci", dims={"B": 2, "S": 32, "E": 128, "M": 384}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
