"""2p_GQA_Attention.

Causal grouped-query attention in bf16, (B,S,H,D) layout, KV heads expanded with jnp.repeat.
Source: Llama-3.1-405B GQA causal attention (JaxBench production task). mk's own implementation,
written from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Causal grouped-query attention. Sizes: B=4, S=4096, Hq=128 query heads, Hkv=8 KV heads, D=128, group"
    " G=Hq/Hkv=16. Inputs are in (B,S,H,D) layout, all bf16. K and V are expanded to 128 heads with "
    "jnp.repeat on a new axis followed by a reshape, so query head h uses KV head floor(h/16); the "
    "expanded copies are materialized. Everything is then transposed to (B,H,S,D). s = q.k^T (einsum, "
    "bf16 result, default precision), multiplied in bf16 by bf16(128^-0.5) = 0.08837890625. Causal mask "
    "from the float tril(ones(S,S)): where j > i, s is set to bf16(-1e9). p = jax.nn.softmax in bf16: m ="
    " row max (bf16), e = exp(s - m) (bf16), den = sum of e accumulated in float32 then rounded to bf16, "
    "p = e / den (bf16), over keys. o = p @ v (einsum, bf16), transposed back to (B,S,Hq,D). Output "
    "(4,4096,128,128) bf16. Quirk: the full (4,128,4096,4096) bf16 score tensor (16 GiB) is materialized,"
    " including the masked half."
)

GFLOP = 4458.2
MIN_BYTES = 1140850688


def gqa_attention(query, key, value):
    """query (B,S,Hq,D), key/value (B,S,Hkv,D), bf16 -> (B,S,Hq,D) bf16."""
    b, s_len, hq, d = query.shape
    hkv = key.shape[2]
    group = hq // hkv
    # materialized expansion: query head h reads KV head h // group
    k = jnp.repeat(key[:, :, :, None, :], group, axis=3).reshape(b, s_len, hq, d)
    v = jnp.repeat(value[:, :, :, None, :], group, axis=3).reshape(b, s_len, hq, d)
    q, k, v = (jnp.transpose(t, (0, 2, 1, 3)) for t in (query, k, v))
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * d**-0.5
    mask = jnp.tril(jnp.ones((s_len, s_len)))
    s = jnp.where(mask != 0, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", p, v)
    return jnp.transpose(o, (0, 2, 1, 3))


TASK = Task(
    name="2p_GQA_Attention",
    reference=gqa_attention,
    args=(
        ArgSpec("query", ("B", "S", "Hq", "D"), "bfloat16", Init("normal")),
        ArgSpec("key", ("B", "S", "Hkv", "D"), "bfloat16", Init("normal")),
        ArgSpec("value", ("B", "S", "Hkv", "D"), "bfloat16", Init("normal")),
    ),
    static=(),
    tolerance=Tolerance(atol=0.05, rtol=0.05),
    scales={
        "full": Scale("full", dims={"B": 4, "S": 4096, "Hq": 128, "Hkv": 8, "D": 128}),
        # same group size (16) as full, two KV heads
        "ci": Scale("ci", dims={"B": 1, "S": 128, "Hq": 32, "Hkv": 2, "D": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
