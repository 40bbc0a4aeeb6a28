# Upstream op: jax.experimental.pallas.ops.gpu.layer_norm.layer_norm (Triton; one program per row, vmapped over the
# leading axes, inside jax.jit and a custom_vjp upstream).
# Task: local:layernorm (no built-in task is a plain LayerNorm: 28k's LayerNorm follows a convolution that would run
# in XLA), defined in tests/test_upstream_kernels.py: f32 (8, 64, 256), weight and bias (256,).
# Target: gpu. Expected verdict: correct.
from jax.experimental.pallas.ops.gpu import layer_norm as upstream


def kernel(x, weight, bias):
    return upstream.layer_norm(x, weight, bias, eps=1e-5)
