# Upstream op: jax.experimental.pallas.ops.tpu.matmul.matmul (the tiled TPU matmul of the Pallas docs).
# Task: jaxbench:8p_GEMM (C = A @ B, bf16 in and out, f32 accumulation) at scale ci (M=128, K=256, N=384).
# Target: tpu. Expected verdict: correct.
# Glue: none; block_shape (128, 128) and block_k 128 divide the ci shapes (grid 1 x 3 x 2).
from jax.experimental.pallas.ops.tpu import matmul as upstream


def kernel(A, B):
    return upstream.matmul(A, B, block_shape=(128, 128), block_k=128)
