# Upstream op: jax.experimental.pallas.ops.tpu.splash_attention (make_splash_mha with a causal mask; GQA:
# 8 query heads per KV head), vmapped over the batch as its documentation does.
# Task: jaxbench:4p_Sparse_Attention (dense causal GQA, (B,H,S,D) bf16, q pre-scaled: no softmax scale) at
# scale ci (B=2, Hq=16, Hkv=2, S=128, D=128).
# Target: tpu. Expected verdict: correct.
# Glue: none; blocks of 128 (the whole ci sequence).
import jax
from jax.experimental.pallas.ops.tpu import splash_attention as splash


def kernel(q, k, v, S, H_q, H_kv, D):
    mask = splash.MultiHeadMask([splash.CausalMask((S, S)) for _ in range(H_q)])
    blocks = splash.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128)
    attend = splash.make_splash_mha_single_device(mask, block_sizes=blocks)
    return jax.vmap(attend)(q, k, v)
