"""14p_Ragged_Dot.

Batched matmul over equal-size expert groups (a 'ragged dot' with uniform groups), bf16.
Source: Mixtral-8x7B expert ragged_dot (JaxBench production task). mk's own implementation, written
from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Despite the name, this is a plain batched matmul with equal group sizes: out[g] = x[g] @ weights[g],"
    " i.e. einsum 'gmk,gkn->gmn' on bf16 with a bf16 result and default precision. G=8, rows per group "
    "1024 (M=8192 total), K=4096, N=14336. Output (8,1024,14336) bf16. There are no group-size inputs."
)

GFLOP = 962.1
MIN_BYTES = 1241513984


def ragged_dot(x, weights):
    """x (G,Mg,K) @ weights (G,K,N) per group, bf16 in and out."""
    return jnp.einsum("gmk,gkn->gmn", x, weights)


TASK = Task(
    name="14p_Ragged_Dot",
    reference=ragged_dot,
    args=(
        ArgSpec("x", ("G", "Mg", "K"), "bfloat16", Init("normal")),
        ArgSpec("weights", ("G", "K", "N"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"G": 8, "Mg": 1024, "K": 4096, "N": 14336}),
        "ci": Scale("ci", dims={"G": 8, "Mg": 64, "K": 128, "N": 256}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
