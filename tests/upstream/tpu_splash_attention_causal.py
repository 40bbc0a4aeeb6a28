# Upstream op: jax.experimental.pallas.ops.tpu.splash_attention (make_splash_mha_single_device with a causal
# mask), built for the call's head count and sequence length (its mask metadata become constants) and vmapped
# over the batch as its documentation does.
# Task: jaxbench:1p_Flash_Attention (causal MHA, (B,H,S,D) bf16) at scale ci (B=1, H=2, S=128, D=128).
# Target: tpu. Expected verdict: correct.
# Glue: q pre-scaled by bf16(D^-0.5) (splash has no softmax scale). Blocks of 128 (any multiple of 128 works).
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash


def kernel(query, key, value):
    heads, seq = query.shape[1], query.shape[2]
    attend = jax.vmap(splash.make_splash_mha_single_device(
        splash.MultiHeadMask([splash.CausalMask((seq, seq)) for _ in range(heads)]),
        block_sizes=splash.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128)))
    q = query * jnp.asarray(query.shape[-1] ** -0.5, query.dtype)
    return attend(q, key, value)
