"""5p_Flex_Attention.

Causal MHA with a dense learned per-head additive score bias (FlexAttention score_mod).
Source: Llama-3.1-70B flex attention (JaxBench production task). mk's own implementation, written
from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Causal MHA with a dense learned per-head additive score bias (a FlexAttention score_mod). Sizes: "
    "B=4, H=64, S=4096, D=128; all bf16. s = einsum('bhqd,bhkd->bhqk', q, k), bf16 result. s = s * "
    "bf16(128^-0.5) (0.08837890625), then s = s + rel_pos_bias[h,i,j], broadcast over batch, added in "
    "bf16. Masking uses a bool tril: j > i is set to bf16(-1e30). p = jax.nn.softmax in bf16: m = row max"
    " (bf16), e = exp(s - m) (bf16), den = sum of e accumulated in float32 then rounded to bf16, p = e / "
    "den (bf16). out = p @ v (einsum, bf16), shape (4,64,4096,128). The bias is an arbitrary dense "
    "(H,S,S) tensor and not a function of i-j, so a kernel must stream it: it is 2 GiB, the largest "
    "input. Static seq_len is used in jnp.ones((S,S)), so it must be static."
)

GFLOP = 2233.4
MIN_BYTES = 3221225472


def flex_attention(q, k, v, rel_pos_bias, head_dim, seq_len):
    """q/k/v (B,H,S,D), rel_pos_bias (H,S,S), bf16; head_dim and seq_len static."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * head_dim**-0.5
    s = s + rel_pos_bias[None]
    mask = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    s = jnp.where(mask, s, -1e30)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


_QKV = ("B", "H", "S", "D")

TASK = Task(
    name="5p_Flex_Attention",
    reference=flex_attention,
    args=(
        ArgSpec("q", _QKV, "bfloat16", Init("normal")),
        ArgSpec("k", _QKV, "bfloat16", Init("normal", std=0.02)),
        ArgSpec("v", _QKV, "bfloat16", Init("normal", std=0.02)),
        ArgSpec("rel_pos_bias", ("H", "S", "S"), "bfloat16", Init("normal", std=0.01)),
    ),
    static=(StaticArg("head_dim", 128), StaticArg("seq_len", 4096)),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4, "H": 64, "S": 4096, "D": 128}),
        "ci": Scale("ci", dims={"B": 1, "H": 2, "S": 128, "D": 128}, static={"head_dim": 128, "seq_len": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
