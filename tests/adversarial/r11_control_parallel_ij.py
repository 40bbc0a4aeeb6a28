# Round 11 control: the same matmul with its output axes "parallel" and the K reduction "arbitrary" (visited in order
# on every chip); the TPU-interpreter check shuffles the two output axes and the result does not change.
# Rule: all. Expected verdict: correct.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_m": [8, 16], "block_k": [128]}


def _matmul_body(x_ref, y_ref, o_ref, acc_ref, *, n_k: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                            precision=jax.lax.Precision.HIGHEST)

    @pl.when(k == n_k - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def kernel(x, y, *, block_m: int = 8, block_n: int = 128, block_k: int = 128):
    m, kdim = x.shape
    _, n = y.shape
    bm, bn, bk = min(block_m, m), min(block_n, n), min(block_k, kdim)
    n_k = kdim // bk
    return pl.pallas_call(
        functools.partial(_matmul_body, n_k=n_k),
        grid=(m // bm, n // bn, n_k),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)
