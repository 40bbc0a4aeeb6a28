# Rule (round 15, stop 35): a Triton kernel that spills registers on H100, named like one of XLA's own kernels
#   (`wrapped_*`, the name XLA gives a lone op it wraps). The compile stage told Pallas kernels from XLA's by the
#   kernel's name, so the spill flag and `--no-spills` skipped it; kernels are now told apart by the HLO instruction
#   XLA launched them for (a kernel custom call or not), never by a name the candidate picks.
# Class: compile figures (a resource the verdict reports, hidden). Target: gpu. Task: a row softmax (rows, 2048) f32.
# Before: correct with no spill flag (and correct under --no-spills). Expected verdict: compile_error under
#   --no-spills naming the kernel (without it: correct, with a spill flag).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

NAME = "wrapped_rows"
BR = 8  # 8 rows of 2,048 float32 at one warp: 512 values a thread, far past 255 registers


def _rows(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)


def kernel(x):
    r, c = x.shape
    return pl.pallas_call(_rows, grid=(r // BR,), in_specs=[pl.BlockSpec((BR, c), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((BR, c), lambda i: (i, 0)),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), name=NAME,
                          compiler_params=plgpu.CompilerParams(num_warps=1))(x)
