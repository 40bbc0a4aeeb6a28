"""1p_Flash_Attention.

Causal multi-head self-attention in bf16, (B,H,S,D) layout.
Source: Baseline causal MHA (JaxBench production task). mk's own implementation, written from the
published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Causal multi-head self-attention. Sizes: B=4, H=64, S=4096, D=128. Layout is (B,H,S,D) and every "
    "tensor is bf16. (1) s[b,h,i,j] = sum_d q[b,h,i,d]*k[b,h,j,d]: einsum 'bhqd,bhkd->bhqk', default "
    "precision, bf16 result. Then s is multiplied in bf16 by D^-0.5, which rounds to 0.08837890625 in "
    "bf16. (2) Causal mask: mask = jnp.tril(jnp.ones((S,S))), a float32 array. Where mask != 0 (key j <= "
    "query i) s is kept; elsewhere it becomes -1e9 rounded to bf16 (-998244352). (3) p = jax.nn.softmax "
    "in bf16: m = row max (bf16), e = exp(s - m) (bf16), den = sum of e accumulated in float32 then "
    "rounded to bf16, p = e / den (bf16), over the key axis j. (4) out[b,h,i,:] = sum_j "
    "p[b,h,i,j]*v[b,h,j,:]: einsum 'bhqk,bhkd->bhqd', bf16 result. There is no dropout and no bias. "
    "Quirk: the reference materializes the full bf16 score tensor (4x64x4096x4096, 8 GiB) and also "
    "computes the masked upper triangle. gflop counts the full S^2 work; a causal flash kernel needs "
    "about half of it."
)

GFLOP = 2229.1
MIN_BYTES = 1073741824


def causal_mha(query, key, value):
    """query/key/value (B,H,S,D) bf16 -> (B,H,S,D) bf16."""
    seq, head_dim = query.shape[2], query.shape[3]
    s = jnp.einsum("bhqd,bhkd->bhqk", query, key)
    s = s * head_dim**-0.5  # weakly typed: a bf16 multiply by bf16(D^-0.5)
    mask = jnp.tril(jnp.ones((seq, seq)))
    s = jnp.where(mask != 0, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p, value)


_QKV = ("B", "H", "S", "D")

TASK = Task(
    name="1p_Flash_Attention",
    reference=causal_mha,
    args=(
        ArgSpec("query", _QKV, "bfloat16", Init("normal")),
        ArgSpec("key", _QKV, "bfloat16", Init("normal")),
        ArgSpec("value", _QKV, "bfloat16", Init("normal")),
    ),
    static=(),
    tolerance=Tolerance(atol=0.05, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4, "H": 64, "S": 4096, "D": 128}),
        "ci": Scale("ci", dims={"B": 1, "H": 2, "S": 128, "D": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
