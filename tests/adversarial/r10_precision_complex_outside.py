# Rule 11/18 (round 10, class precision): the last 128 columns of K done by XLA as one complex64 dot at default
#   precision (the real parts carry the operands, the imaginary parts are zero). The rule tested
#   `"f32" in {"complex<f32>"}`, so it never matched; a complex64 dot is float32 pairs, one bf16 pass on a TPU.
# Class: precision. Target: tpu. Task: adv_matmul.
# Before: correct with a flag (the FLOPs outside were also counted at a quarter of their real cost).
# Expected verdict: rejected, reason contains "below HIGHEST precision".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _mm(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)


def kernel(x, y):
    k = x.shape[1] - 128
    head = pl.pallas_call(_mm, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype))(x[:, :k], y[:k])
    tail = jnp.dot(x[:, k:].astype(jnp.complex64), y[k:].astype(jnp.complex64))
    return head + tail.real.astype(x.dtype)
