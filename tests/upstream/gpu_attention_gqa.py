# Upstream op: jax.experimental.pallas.ops.gpu.attention.mha (Triton flash attention, causal=True).
# Task: jaxbench:2p_GQA_Attention (causal GQA, (B,S,H,D) bf16, 16 query heads per KV head) at scale ci
# (B=1, S=128, Hq=32, Hkv=2, D=128).
# Target: gpu. Expected verdict: correct.
# Glue: KV heads repeated to the query heads, as the reference does; (B,S,H,D) is the op's layout.
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu import attention as upstream

_BLOCKS = upstream.BlockSizes(block_q=64, block_k=64)


def kernel(query, key, value):
    group = query.shape[2] // key.shape[2]
    k = jnp.repeat(key, group, axis=2)
    v = jnp.repeat(value, group, axis=2)
    return upstream.mha(query, k, v, None, sm_scale=query.shape[-1] ** -0.5, causal=True, block_sizes=_BLOCKS)
