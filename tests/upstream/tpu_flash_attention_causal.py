# Upstream op: jax.experimental.pallas.ops.tpu.flash_attention.flash_attention (causal=True).
# Task: jaxbench:1p_Flash_Attention (causal MHA, (B,H,S,D) bf16) at scale ci (B=1, H=2, S=128, D=128).
# Target: tpu. Expected verdict: correct.
# Glue: none; the task's layout is the op's layout. Blocks of 128 (the whole ci sequence).
from jax.experimental.pallas.ops.tpu import flash_attention as upstream

_BLOCKS = upstream.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)


def kernel(query, key, value):
    return upstream.flash_attention(query, key, value, causal=True, sm_scale=query.shape[-1] ** -0.5,
                                    block_sizes=_BLOCKS)
