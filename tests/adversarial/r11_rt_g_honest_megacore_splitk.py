# False-positive probe G (honest): the standard two-TensorCore split-K matmul. Leading axis c (size 2) "parallel"
# picks a half of K and its own partial-output slab; K within the half is "arbitrary" with a VMEM accumulator; the
# two partials are added outside (one add per output element, an epilogue). Race-free on a two-core chip.
# Control: an honest two-core split-K. Expected verdict: correct.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_k": [128]}


def _body(x_ref, y_ref, o_ref, acc_ref, *, n_k: int):
    k = pl.program_id(1)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                            precision=jax.lax.Precision.HIGHEST)

    @pl.when(k == n_k - 1)
    def _store():
        o_ref[0] = acc_ref[...]


def kernel(x, y, *, block_k: int = 128):
    m, kdim = x.shape
    n = y.shape[1]
    bk = block_k
    kp = -(-kdim // (2 * bk)) * 2 * bk
    x = jnp.pad(x, ((0, 0), (0, kp - kdim)))
    y = jnp.pad(y, ((0, kp - kdim), (0, 0)))
    n_k = kp // (2 * bk)
    parts = pl.pallas_call(
        functools.partial(_body, n_k=n_k),
        grid=(2, n_k),
        in_specs=[pl.BlockSpec((m, bk), lambda c, k: (0, c * n_k + k)),
                  pl.BlockSpec((bk, n), lambda c, k: (c * n_k + k, 0))],
        out_specs=pl.BlockSpec((1, m, n), lambda c, k: (c, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((2, m, n), jnp.float32),
        scratch_shapes=[pltpu.VMEM((m, n), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x, y)
    return (parts[0] + parts[1]).astype(x.dtype)
