# Upstream op: jax.experimental.pallas.ops.gpu.attention.mha (Triton flash attention, causal=True; it is
# wrapped in jax.jit and a custom_vjp upstream).
# Task: jaxbench:1p_Flash_Attention (causal MHA, (B,H,S,D) bf16) at scale ci (B=1, H=2, S=128, D=128).
# Target: gpu. Expected verdict: correct.
# Glue: (B,H,S,D) <-> the op's (B,S,H,D) transposes. Blocks of 64 queries x 64 keys.
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu import attention as upstream

_BLOCKS = upstream.BlockSizes(block_q=64, block_k=64)


def kernel(query, key, value):
    q, k, v = (jnp.transpose(t, (0, 2, 1, 3)) for t in (query, key, value))
    o = upstream.mha(q, k, v, None, sm_scale=query.shape[-1] ** -0.5, causal=True, block_sizes=_BLOCKS)
    return jnp.transpose(o, (0, 2, 1, 3))
