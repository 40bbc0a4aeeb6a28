# Upstream op: jax.experimental.pallas.ops.gpu.rms_norm.rms_norm_forward_kernel (the row kernel of the upstream
# rms_norm), its pallas_call built once per row width and epsilon and kept in a module-level cache (as library
# code that builds its kernels up front does), vmapped over the leading axes as the upstream rms_norm does.
# Task: jaxbench:12p_RMSNorm (f32 statistics over the last axis, scale multiply, bf16 out) at scale ci
# (B=2, S=16, E=512).
# Target: gpu. Expected verdict: correct.
# Glue: a zero bias (the kernel computes x * rstd * weight + bias); the width and epsilon of the call pick the
# cached kernel; its block is the next power of two of the width (Triton blocks are powers of two; the upstream
# kernel masks the tail), as the upstream rms_norm chooses it.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
from jax.experimental.pallas.ops.gpu import rms_norm as upstream


@functools.lru_cache(maxsize=None)
def _rows(width, eps, dtype):
    row = pl.pallas_call(
        functools.partial(upstream.rms_norm_forward_kernel, eps=eps, block_size=pl.next_power_of_2(width)),
        out_shape=jax.ShapeDtypeStruct((width,), dtype),
        grid=(),
        compiler_params=plgpu.CompilerParams(num_warps=2, num_stages=3),
    )
    return jax.jit(jax.vmap(jax.vmap(row, in_axes=(0, None, None)), in_axes=(0, None, None)))


def kernel(x, scale, epsilon):
    return _rows(x.shape[-1], float(epsilon), x.dtype)(x, scale, jnp.zeros_like(scale))
