"""10p_Sparse_MoE.

Top-2-of-8 mixture of SwiGLU experts, computed densely over all experts; float32 output.
Source: Mixtral-8x7B sparse MoE layer (JaxBench production task). mk's own implementation, written
from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Top-2 MoE with SwiGLU experts, computed DENSELY over all experts. Sizes: x (B=2,S=4096,E=4096) bf16,"
    " N=8 experts, M=14336, K=2. (1) logits = x @ router_weights, (2,4096,8) bf16. (2) (vals, idx) = "
    "jax.lax.top_k(logits, 2): descending, ties resolved to the lower index. (3) probs = jax.nn.softmax "
    "in bf16: m = row max (bf16), e = exp(s - m) (bf16), den = sum of e accumulated in float32 then "
    "rounded to bf16, p = e / den (bf16), taken over the 2 selected logits. (4) For EVERY expert n: g = "
    "silu(einsum('bse,nem->bsnm', x, Wg)) in bf16, u = einsum(x, Wu) in bf16, h = g*u, y[b,s,n,:] = "
    "einsum('bsnm,nme->bsne', h, Wd), all bf16 results. (5) w[b,s,n] = sum_k one_hot(idx[b,s,k], 8)[n] * "
    "probs[b,s,k]. one_hot defaults to float32, so w is float32: the softmax prob for the 2 chosen "
    "experts and 0 elsewhere. (6) out[b,s,e] = sum_n y[b,s,n,e]*w[b,s,n], an einsum of bf16 y with f32 w,"
    " so the result is float32. Output (2,4096,4096) float32. Note the output dtype is f32 because of the"
    " one_hot promotion. Quirks: the reference computes all 8 experts for every token, 4x the FLOPs of "
    "real top-2 routing, and the unselected experts are multiplied by exactly 0. It materializes "
    "(2,4096,8,14336) bf16 intermediates (about 1.9 GB each). num_experts_per_tok is used as the top_k k,"
    " so it must be static."
)

GFLOP = 23095.8
MIN_BYTES = 3019964416


def sparse_moe(x, router_weights, expert_gate_kernels, expert_up_kernels, expert_down_kernels, num_experts_per_tok):
    """x (B,S,E) bf16; router (E,N); gate/up (N,E,M); down (N,M,E) -> (B,S,E) float32."""
    logits = jnp.dot(x, router_weights)
    vals, idx = jax.lax.top_k(logits, num_experts_per_tok)
    probs = jax.nn.softmax(vals, axis=-1)
    g = jax.nn.silu(jnp.einsum("bse,nem->bsnm", x, expert_gate_kernels))
    u = jnp.einsum("bse,nem->bsnm", x, expert_up_kernels)
    y = jnp.einsum("bsnm,nme->bsne", g * u, expert_down_kernels)
    one_hot = jax.nn.one_hot(idx, router_weights.shape[1])  # float32: w is float32
    w = jnp.sum(one_hot * probs[..., None], axis=-2)
    return jnp.einsum("bsne,bsn->bse", y, w)


TASK = Task(
    name="10p_Sparse_MoE",
    reference=sparse_moe,
    args=(
        ArgSpec("x", ("B", "S", "E"), "bfloat16", Init("normal")),
        ArgSpec("router_weights", ("E", "N"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("expert_gate_kernels", ("N", "E", "M"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("expert_up_kernels", ("N", "E", "M"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("expert_down_kernels", ("N", "M", "E"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(StaticArg("num_experts_per_tok", 2),),
    tolerance=Tolerance(atol=0.1, rtol=0.1),
    scales={
        "full": Scale("full", dims={"B": 2, "S": 4096, "E": 4096, "N": 8, "M": 14336}),
        "ci": Scale("ci", dims={"B": 1, "S": 32, "E": 128, "N": 8, "M": 256}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
