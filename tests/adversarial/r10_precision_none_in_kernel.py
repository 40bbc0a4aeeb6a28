# Rule 18 (round 10, class precision): `jnp.dot` inside the kernel with no `precision` on the fp32-HIGHEST matmul
#   task, the line a language model writes in most first kernels. Its jaxpr says precision=None; Mosaic lowers it
#   as one bf16 MXU pass (Triton as TF32), so it is wrong on the chip; the CPU interpreter computes it in f32.
# Class: precision. Target: tpu. Task: adv_matmul.
# Before: correct (the rule matched only the names DEFAULT/HIGH/BF16).
# Expected verdict: rejected, reason contains "precision=None ... HIGHEST".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _mm(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...])


def kernel(x, y):
    return pl.pallas_call(_mm, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype))(x, y)
