# Rule 11/18 (round 3, class precision): the in-kernel precision check, moved outside. The kernel does 3/4 of the
#   contraction at HIGHEST; XLA does the last quarter with precision=DEFAULT, which a TPU runs as one bf16 pass
#   and the CPU (every case here) runs in full f32. 25% of the FLOPs outside is only a flag. On a TPU the result
#   is off by up to 0.08 (94% of elements outside atol=rtol=1e-4, simulated with bf16-rounded operands).
# Class: precision. Target: tpu. Task: adv_matmul.
# Today (HEAD 560b111): correct, flag "25% of the reference's FLOPs run outside the kernels".
# Expected verdict: rejected, reason contains "precision" (judge side, from the exported target StableHLO: a
#   dot_general / convolution on f32 operands whose precision_config is not HIGHEST on a task that pins HIGHEST).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _mm(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)


def kernel(x, y):
    k = x.shape[1] * 3 // 4
    head = pl.pallas_call(_mm, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype))(x[:, :k], y[:k])
    return head + jnp.dot(x[:, k:], y[k:], precision=jax.lax.Precision.DEFAULT)
