# Rule 18 / 11 (round 2, class semantics): `precision=DEFAULT` inside the kernel on the fp32-HIGHEST matmul task.
#   On a TPU, DEFAULT is one bf16 MXU pass (errors ~1e-2 here, far outside atol 1e-4); in the CPU interpreter the
#   dot is exact fp32, so every case matches. The precision the task pins is only honoured off-device.
# Class: semantics (lower in-kernel dot precision). Target: tpu. Task: adv_matmul.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "precision" (the kernel's dot precision is checked on f32-HIGHEST tasks).
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _matmul_body(x_ref, y_ref, o_ref, acc_ref, *, n_k: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                            precision=jax.lax.Precision.DEFAULT)

    @pl.when(k == n_k - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def kernel(x, y):
    (m, kdim), n = x.shape, y.shape[1]
    bm, bn, bk = 8, 128, 128
    return pl.pallas_call(
        functools.partial(_matmul_body, n_k=kdim // bk),
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(x, y)
