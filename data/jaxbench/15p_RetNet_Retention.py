"""15p_RetNet_Retention.

Parallel multi-scale retention: per-head decay mask, |row|-sum normalisation, bf16 value product.
Source: RetNet-6.7B retention (JaxBench production task). mk's own implementation, written from the
published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Parallel retention. Sizes: B=4, H=16, S=4096, D=256; inputs bf16 in (B,H,S,D). Per head, gamma_h = 1"
    " - 2^(-5-h) for h=0..15 in f32. decay[h,i,j] = exp(log(gamma_h) * max(i-j,0)) * [i>=j], all in f32, "
    "i.e. gamma_h^(i-j) for j<=i and 0 otherwise. qk = einsum('bhsd,bhtd->bhst', f32(q), f32(k)): f32 "
    "operands, default precision, f32 result. r = qk * decay. den[b,h,i] = max(sum_j |r[b,h,i,j]|, 1.0); "
    "r = r / den. out = einsum('bhst,bhtd->bhsd', bf16(r), v): bf16 operands and result. Output "
    "(4,16,4096,256) bf16. There is no 1/sqrt(D) scaling, no group norm, no rotary/xpos and no gating. "
    "Quirk: the reference materializes the f32 (4,16,4096,4096) score tensor (4 GiB) plus a "
    "(16,4096,4096) f32 decay matrix. The normalizer needs the full row of |r| before the PV product, "
    "which forces two passes or a row-complete tile."
)

GFLOP = 1105.6
MIN_BYTES = 536870912


def retention(query, key, value):
    """query/key/value (B,H,S,D) bf16 -> (B,H,S,D) bf16."""
    _, h, s, _ = query.shape
    gamma = 1.0 - 2.0 ** (-5.0 - jnp.arange(h, dtype=jnp.float32))
    i = jnp.arange(s)[:, None]
    j = jnp.arange(s)[None, :]
    dist = jnp.maximum(i - j, 0).astype(jnp.float32)
    decay = jnp.exp(jnp.log(gamma)[:, None, None] * dist) * (i >= j).astype(jnp.float32)
    qk = jnp.einsum("bhsd,bhtd->bhst", query.astype(jnp.float32), key.astype(jnp.float32))
    r = qk * decay
    den = jnp.maximum(jnp.sum(jnp.abs(r), axis=-1, keepdims=True), 1.0)
    r = r / den
    return jnp.einsum("bhst,bhtd->bhsd", r.astype(jnp.bfloat16), value)


_QKV = ("B", "H", "S", "D")

TASK = Task(
    name="15p_RetNet_Retention",
    reference=retention,
    args=(
        ArgSpec("query", _QKV, "bfloat16", Init("normal")),
        ArgSpec("key", _QKV, "bfloat16", Init("normal")),
        ArgSpec("value", _QKV, "bfloat16", Init("normal")),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4, "H": 16, "S": 4096, "D": 256}),
        "ci": Scale("ci", dims={"B": 1, "H": 4, "S": 128, "D": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
