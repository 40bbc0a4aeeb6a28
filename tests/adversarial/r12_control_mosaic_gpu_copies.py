# Round 12 control (issue 22, item 5): a Mosaic GPU kernel with explicit GMEM -> SMEM copies and a barrier. No CPU
# interpreter of JAX 0.10.2 runs copy_gmem_to_smem, so its cases cannot run here: unverifiable_here with that reason,
# after the compile stage compiled its device program for H100.
# Rule: 5. Expected verdict: unverifiable_here.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def _body(x_gmem, y_gmem, o_gmem, x_smem, y_smem, o_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
    plgpu.barrier_wait(barrier)
    plgpu.copy_gmem_to_smem(y_gmem, y_smem, barrier)
    plgpu.barrier_wait(barrier)
    x = x_smem[...]
    o_smem[...] = jnp.tanh(x) * y_smem[...] + 0.5 * x
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, o_gmem)
    plgpu.wait_smem_to_gmem(0)


def kernel(x, y):
    shape = x.shape
    return pl.pallas_call(
        _body,
        in_specs=[pl.BlockSpec(memory_space=plgpu.GMEM), pl.BlockSpec(memory_space=plgpu.GMEM)],
        out_specs=pl.BlockSpec(memory_space=plgpu.GMEM),
        out_shape=jax.ShapeDtypeStruct(shape, x.dtype),
        scratch_shapes=[plgpu.SMEM(shape, x.dtype), plgpu.SMEM(shape, x.dtype), plgpu.SMEM(shape, x.dtype),
                        plgpu.Barrier(num_arrivals=1)],
        compiler_params=plgpu.CompilerParams())(x, y)
