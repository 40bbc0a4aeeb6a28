# Upstream op: jax.experimental.pallas.ops.gpu.rms_norm.rms_norm_forward_kernel (the row kernel of the upstream
# rms_norm), its pallas_call bound once at import time (as library code that builds its kernels up front does)
# and vmapped over the leading axes, as the upstream rms_norm does.
# Task: jaxbench:12p_RMSNorm (f32 statistics over the last axis, scale multiply, bf16 out) at scale ci
# (B=2, S=16, E=512).
# Target: gpu. Expected verdict: correct.
# Glue: a zero bias (the kernel computes x * rstd * weight + bias); epsilon is the task's 1e-5, bound with the
# kernel since the ci width (E=512) fixes the kernel anyway.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
from jax.experimental.pallas.ops.gpu import rms_norm as upstream

_WIDTH = 512
_ROW = pl.pallas_call(
    functools.partial(upstream.rms_norm_forward_kernel, eps=1e-5, block_size=_WIDTH),
    out_shape=jax.ShapeDtypeStruct((_WIDTH,), jnp.bfloat16),
    grid=(),
    compiler_params=plgpu.CompilerParams(num_warps=2, num_stages=3),
)
_ROWS = jax.jit(jax.vmap(jax.vmap(_ROW, in_axes=(0, None, None)), in_axes=(0, None, None)))


def kernel(x, scale, epsilon):
    return _ROWS(x, scale, jnp.zeros_like(scale))
