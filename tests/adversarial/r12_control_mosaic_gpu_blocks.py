# Round 12 control (issue 22, item 5): a Mosaic GPU kernel written with BlockSpecs (Pallas pipelines them through
# SMEM): the HLO interpreter runs it, the compile stage compiles it for H100.
# Rule: 5. Expected verdict: correct.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    rows, cols = x.shape
    spec = pl.BlockSpec((8, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=plgpu.CompilerParams())(x, y)
