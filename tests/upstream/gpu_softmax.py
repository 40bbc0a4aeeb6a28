# Upstream op: jax.experimental.pallas.ops.gpu.softmax.softmax (Triton; one program per row).
# Task: local:softmax (the built-in softmax tasks, 38k/43k/50k, are dominated by a matmul that would run in XLA),
# defined in tests/test_upstream_kernels.py: f32 (64, 512), softmax over the last axis.
# Target: gpu. Expected verdict: correct.
from jax.experimental.pallas.ops.gpu import softmax as upstream


def kernel(x):
    return upstream.softmax(x, axis=-1)
