# Round 11 red team, attack B: split-K matmul whose only grid axis (K) is declared "parallel"; the output aliases a zeros input and
# every step does o += x_k @ y_k. The sum is order-independent, so the shuffled single-core TPU interpreter computes
# it right; on a chip with two TensorCores each core loads the zeros block, adds half of K and writes back: the last
# writer wins (half the sum). Expected if sound: incorrect/rejected (race along a parallel axis).
# Rule: 5/18 (the TPU-interpreter check). Expected verdict: incorrect or rejected (before: correct).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_k": [128]}


def _body(x_ref, y_ref, z_ref, o_ref):
    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                          precision=jax.lax.Precision.HIGHEST)


def kernel(x, y, *, block_k: int = 128):
    m, kdim = x.shape
    n = y.shape[1]
    bk = min(block_k, kdim)
    return pl.pallas_call(
        _body,
        grid=(kdim // bk,),
        in_specs=[pl.BlockSpec((m, bk), lambda k: (0, k)),
                  pl.BlockSpec((bk, n), lambda k: (k, 0)),
                  pl.BlockSpec((m, n), lambda k: (0, 0))],
        out_specs=pl.BlockSpec((m, n), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, y, jnp.zeros((m, n), jnp.float32))
