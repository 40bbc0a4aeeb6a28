# Upstream op: jax.experimental.pallas.ops.tpu.splash_attention (make_splash_mha_single_device with a causal
# mask), built once at import time (its mask metadata become constants) and vmapped over the batch as its
# documentation does.
# Task: jaxbench:1p_Flash_Attention (causal MHA, (B,H,S,D) bf16) at scale ci (B=1, H=2, S=128, D=128).
# Target: tpu. Expected verdict: correct.
# Glue: q pre-scaled by bf16(D^-0.5) (splash has no softmax scale). Blocks of 128 (the whole ci sequence).
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash

_HEADS, _SEQ = 2, 128  # the ci scale's shapes: the mask is static, so the kernel is built for them
_ATTEND = jax.vmap(splash.make_splash_mha_single_device(
    splash.MultiHeadMask([splash.CausalMask((_SEQ, _SEQ)) for _ in range(_HEADS)]),
    block_sizes=splash.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128)))


def kernel(query, key, value):
    q = query * jnp.asarray(query.shape[-1] ** -0.5, query.dtype)
    return _ATTEND(q, key, value)
