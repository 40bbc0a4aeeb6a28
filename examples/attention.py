"""Causal multi-head attention, (B, H, S, D) layout, bf16.

An mk task module. With no model configured the offline author recognises the
softmax(q k^T) v pattern and writes a flash-attention Pallas kernel (online
softmax over key blocks, causal block skipping); with a model (MK_LM or
GEMINI_API_KEY) the agents plan and write their own.
"""

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance


def attention(q, k, v):
    d = q.shape[-1]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) * d**-0.5
    n = q.shape[2]
    mask = jnp.tril(jnp.ones((n, n), dtype=bool))
    s = jnp.where(mask, s, -1e30)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


TASK = Task(
    name="causal_attention",
    reference=attention,
    args=tuple(ArgSpec(n, ("B", "H", "S", "D"), "bfloat16", Init("normal")) for n in ("q", "k", "v")),
    tolerance=Tolerance(atol=3e-2, rtol=3e-2),
    scales={
        "full": Scale("full", dims={"B": 4, "H": 32, "S": 4096, "D": 128}),
        "ci": Scale("ci", dims={"B": 1, "H": 2, "S": 128, "D": 64}),
    },
    description="Causal softmax attention without dropout; f32 scores, bf16 probabilities.",
)
