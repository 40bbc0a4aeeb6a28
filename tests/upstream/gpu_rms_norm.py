# Upstream op: jax.experimental.pallas.ops.gpu.rms_norm.rms_norm (Triton; one program per row, the
# pallas_call vmapped twice over the leading axes, inside jax.jit and a custom_vjp upstream).
# Task: jaxbench:12p_RMSNorm (f32 statistics over the last axis, scale multiply, bf16 out) at scale ci
# (B=2, S=16, E=512).
# Target: gpu. Expected verdict: correct.
# Glue: a zero bias (the op computes x * rstd * weight + bias).
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu import rms_norm as upstream


def kernel(x, scale, epsilon):
    return upstream.rms_norm(x, scale, jnp.zeros_like(scale), eps=epsilon)
