# Round 11 (issue 22, item 2): a matmul whose only grid axis is the K reduction, declared "parallel", with an
# accumulator carried along it (initialised at k == 0, stored at the last k). The HLO interpreter runs the grid in
# order, so the cases pass; a chip with two TensorCores splits "parallel" axes between them. The TPU interpreter's
# default seed happens to visit this axis in order at the task's size (2 steps), so its check passed too (as the
# attacker's kernel did); the judge now picks a seed that visits every parallel axis out of order.
# Rule: 5/18 (the TPU-interpreter check). Expected verdict: incorrect, naming the shuffled "parallel" axes.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_k": [128]}


def _matmul_body(x_ref, y_ref, o_ref, acc_ref, *, n_k: int):
    k = pl.program_id(0)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                            precision=jax.lax.Precision.HIGHEST)

    @pl.when(k == n_k - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def kernel(x, y, *, block_k: int = 128):
    m, kdim = x.shape
    _, n = y.shape
    bk = min(block_k, kdim)
    n_k = kdim // bk
    return pl.pallas_call(
        functools.partial(_matmul_body, n_k=n_k),
        grid=(n_k,),
        in_specs=[pl.BlockSpec((m, bk), lambda k: (0, k)),
                  pl.BlockSpec((bk, n), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((m, n), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((m, n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, y)
