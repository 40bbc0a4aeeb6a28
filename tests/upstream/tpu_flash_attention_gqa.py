# Upstream op: jax.experimental.pallas.ops.tpu.flash_attention.flash_attention (causal=True).
# Task: jaxbench:2p_GQA_Attention (causal GQA, (B,S,H,D) bf16, 16 query heads per KV head) at scale ci
# (B=1, S=128, Hq=32, Hkv=2, D=128).
# Target: tpu. Expected verdict: correct.
# Glue: KV heads repeated to the query heads (as the reference does) and (B,S,H,D) <-> (B,H,S,D) transposes.
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import flash_attention as upstream

_BLOCKS = upstream.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)


def kernel(query, key, value):
    group = query.shape[2] // key.shape[2]
    q = jnp.transpose(query, (0, 2, 1, 3))
    k = jnp.repeat(jnp.transpose(key, (0, 2, 1, 3)), group, axis=1)
    v = jnp.repeat(jnp.transpose(value, (0, 2, 1, 3)), group, axis=1)
    o = upstream.flash_attention(q, k, v, causal=True, sm_scale=query.shape[-1] ** -0.5, block_sizes=_BLOCKS)
    return jnp.transpose(o, (0, 2, 1, 3))
