"""3p_MLA_Attention.

Simplified DeepSeek-V3 multi-head latent attention prefill (low-rank q/kv, shared RoPE key, causal).
Source: DeepSeek-V3-671B MLA (JaxBench production task). mk's own implementation, written from the
published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Simplified DeepSeek-V3 MLA prefill with causal attention. Sizes: B=4, S=2048, E=7168, H=128, "
    "q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128. Every matmul is jnp.dot on bf16 operands "
    "(default precision, bf16 result), and all elementwise math is in bf16 unless stated otherwise. (1) q"
    " = (x @ q_down_proj) @ q_up_proj, shape (B,S,24576), reshaped to (B,S,H,192); q_nope = [...,:128], "
    "q_rope = [...,128:]. (2) kv = x @ kv_down_proj, shape (B,S,576); k_latent = kv[...,:512]; k_rope_raw"
    " = kv[...,512:], a single 64-dim rope key per token shared by all heads (broadcast to H). (3) k_nope"
    " = (k_latent @ k_up_proj) reshaped to (B,S,H,128); v = (k_latent @ v_up_proj) reshaped to "
    "(B,S,H,128). (4) RoPE in rotate-half (non-interleaved) form. inv_freq[i] = 1/10000^(2i/64) for "
    "i=0..31, and angle[s,i] = s*inv_freq[i] for positions s=0..S-1, both in f32. cos and sin are "
    "computed in f32 and then cast to bf16. For a 64-vector u with u1=u[:32] and u2=u[32:], rope(u) = "
    "concat(u1*cos - u2*sin, u2*cos + u1*sin), computed in bf16. RoPE is applied to q_rope and to the "
    "broadcast k_rope. (5) qf = concat(q_nope, rope(q_rope)) and kf = concat(k_nope, rope(k_rope)), each "
    "192-dim. s = qf.kf (bf16 einsum), multiplied by bf16(192^-0.5) = 0.072265625. Causal mask from the "
    "float tril: masked positions get bf16(-1e9). p = jax.nn.softmax in bf16: m = row max (bf16), e = "
    "exp(s - m) (bf16), den = sum of e accumulated in float32 then rounded to bf16, p = e / den (bf16). "
    "(6) o = p @ v, shape (B,H,S,128), transposed to (B,S,H*128) with flat index h*128+d; out = o @ "
    "o_proj, shape (4,2048,7168) bf16. The reference has no latent RMSNorms, no YaRN scaling and no KV "
    "cache. The static args (H, dims, kv_lora_rank) are used in reshapes and slices, so they must be "
    "Python ints (static under jit). mk note: the ci scale keeps the head-dim ratios (nope = v = 2*rope) "
    "with 4 heads, nope 32, rope 16, kv_lora 32, q_lora 64, E 256; its static args change with it, so the"
    " score scale there is bf16(48^-0.5)."
)

GFLOP = 4455.4
MIN_BYTES = 609091584


def _rope(u, cos, sin):
    """Rotate-half RoPE on the last axis, in the dtype of ``u`` (bf16)."""
    half = u.shape[-1] // 2
    u1, u2 = u[..., :half], u[..., half:]
    return jnp.concatenate([u1 * cos - u2 * sin, u2 * cos + u1 * sin], axis=-1)


def mla_attention(
    x,
    q_down_proj,
    q_up_proj,
    kv_down_proj,
    k_up_proj,
    v_up_proj,
    o_proj,
    num_heads,
    qk_nope_head_dim,
    qk_rope_head_dim,
    v_head_dim,
    kv_lora_rank,
    rope_theta,
):
    b, s_len, _ = x.shape
    h, nope, rope = num_heads, qk_nope_head_dim, qk_rope_head_dim
    q = jnp.dot(jnp.dot(x, q_down_proj), q_up_proj).reshape(b, s_len, h, nope + rope)
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    kv = jnp.dot(x, kv_down_proj)
    k_latent, k_rope = kv[..., :kv_lora_rank], kv[..., kv_lora_rank:]
    k_rope = jnp.broadcast_to(k_rope[:, :, None, :], (b, s_len, h, rope))
    k_nope = jnp.dot(k_latent, k_up_proj).reshape(b, s_len, h, nope)
    v = jnp.dot(k_latent, v_up_proj).reshape(b, s_len, h, v_head_dim)

    inv_freq = 1.0 / (rope_theta ** (jnp.arange(0, rope, 2, dtype=jnp.float32) / rope))
    angle = jnp.arange(s_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos = jnp.cos(angle).astype(jnp.bfloat16)[None, :, None, :]
    sin = jnp.sin(angle).astype(jnp.bfloat16)[None, :, None, :]
    qf = jnp.concatenate([q_nope, _rope(q_rope, cos, sin)], axis=-1)
    kf = jnp.concatenate([k_nope, _rope(k_rope, cos, sin)], axis=-1)

    s = jnp.einsum("bqhd,bkhd->bhqk", qf, kf) * (nope + rope) ** -0.5
    mask = jnp.tril(jnp.ones((s_len, s_len)))
    s = jnp.where(mask != 0, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bhqd", p, v)
    o = jnp.transpose(o, (0, 2, 1, 3)).reshape(b, s_len, h * v_head_dim)
    return jnp.dot(o, o_proj)


def _dims(b, s, e, h, q_lora, kv_lora, nope, rope, v_head):
    return {
        "B": b, "S": s, "E": e, "QL": q_lora, "KVL": kv_lora,
        "HQK": h * (nope + rope), "KVR": kv_lora + rope, "HN": h * nope, "HV": h * v_head,
    }


def _static(h, nope, rope, v_head, kv_lora):
    return {"num_heads": h, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": v_head, "kv_lora_rank": kv_lora}


TASK = Task(
    name="3p_MLA_Attention",
    reference=mla_attention,
    args=(
        ArgSpec("x", ("B", "S", "E"), "bfloat16", Init("normal")),
        ArgSpec("q_down_proj", ("E", "QL"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("q_up_proj", ("QL", "HQK"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("kv_down_proj", ("E", "KVR"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("k_up_proj", ("KVL", "HN"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("v_up_proj", ("KVL", "HV"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("o_proj", ("HV", "E"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(
        StaticArg("num_heads", 128),
        StaticArg("qk_nope_head_dim", 128),
        StaticArg("qk_rope_head_dim", 64),
        StaticArg("v_head_dim", 128),
        StaticArg("kv_lora_rank", 512),
        StaticArg("rope_theta", 10000),
    ),
    tolerance=Tolerance(atol=0.05, rtol=0.01),
    scales={
        "full": Scale("full", dims=_dims(4, 2048, 7168, 128, 1536, 512, 128, 64, 128)),
        # same head-dim ratios (nope = v = 2 * rope), 4 heads, small ranks
        "ci": Scale("ci", dims=_dims(1, 64, 256, 4, 64, 32, 32, 16, 32), static=_static(4, 32, 16, 32, 32)),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
