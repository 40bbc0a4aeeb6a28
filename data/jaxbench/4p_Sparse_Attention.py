"""4p_Sparse_Attention.

Dense causal GQA (despite the name), vmapped over the batch; q arrives pre-scaled.
Source: Llama-3.1-70B 'sparse attention' (JaxBench production task). mk's own implementation,
written from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Despite the name, this is dense causal GQA with no sparsity pattern. Sizes: B=4, Hq=64, Hkv=8, "
    "S=4096, D=128; layout (B,H,S,D); all bf16. The computation is vmapped over the batch. For each "
    "batch, K and V are repeated along the head axis (jnp.repeat by 8), so q head h uses KV head "
    "floor(h/8). s = einsum('hqd,hkd->hqk'), bf16 result. There is NO softmax scale inside computation() "
    "because q was pre-scaled by D^-0.5 at input generation. Masking uses a bool tril(ones(S,S)): key j >"
    " query i is set to bf16(-1e30) (about -1.0003e30). p = jax.nn.softmax in bf16: m = row max (bf16), e"
    " = exp(s - m) (bf16), den = sum of e accumulated in float32 then rounded to bf16, p = e / den "
    "(bf16). out = einsum('hqk,hkd->hqd', p, v_rep), bf16, shape (4,64,4096,128). The static S is used in"
    " jnp.ones((S,S)), so it must be static; passing it as a traced jit argument fails with "
    "ConcretizationTypeError. The full (4,64,4096,4096) score tensor is materialized. mk note: the ci "
    "scale keeps the group size 8 (16 query heads, 2 KV heads) and passes S=128 as static."
)

GFLOP = 2224.8
MIN_BYTES = 603979776


def sparse_attention(q, k, v, S, H_q, H_kv, D):
    """q (B,H_q,S,D), k/v (B,H_kv,S,D), bf16; S, H_q, H_kv, D static."""
    n_rep = H_q // H_kv
    mask = jnp.tril(jnp.ones((S, S), dtype=bool))

    def one(qb, kb, vb):
        k_rep = jnp.repeat(kb, n_rep, axis=0)
        v_rep = jnp.repeat(vb, n_rep, axis=0)
        s = jnp.einsum("hqd,hkd->hqk", qb, k_rep)  # no scale: q is pre-scaled by D^-0.5
        s = jnp.where(mask, s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        return jnp.einsum("hqk,hkd->hqd", p, v_rep)

    return jax.vmap(one)(q, k, v)


TASK = Task(
    name="4p_Sparse_Attention",
    reference=sparse_attention,
    args=(
        # N(0,1) * bf16(128^-0.5): the softmax scale is folded into the input
        ArgSpec("q", ("B", "Hq", "S", "D"), "bfloat16", Init("normal", std=0.08837890625)),
        ArgSpec("k", ("B", "Hkv", "S", "D"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("v", ("B", "Hkv", "S", "D"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(StaticArg("S", 4096), StaticArg("H_q", 64), StaticArg("H_kv", 8), StaticArg("D", 128)),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4, "Hq": 64, "Hkv": 8, "S": 4096, "D": 128}),
        # same group size (8) as full
        "ci": Scale(
            "ci",
            dims={"B": 2, "Hq": 16, "Hkv": 2, "S": 128, "D": 128},
            static={"S": 128, "H_q": 16, "H_kv": 2, "D": 128},
        ),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
