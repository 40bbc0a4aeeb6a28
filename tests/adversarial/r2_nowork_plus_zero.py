# Rule 15 (round 2, class nowork): the kernel's result is added as `+ 0 * kernel_out`; jnp computes the answer.
#   The kernel is live in the dataflow; XLA does not fold `0 * k` for floats, and a NaN ablation of the kernel still
#   changes the output (0 * NaN = NaN), so only the FLOP count outside kernels catches it.
# Class: nowork. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "outside the kernel" (reference FLOPs counted outside kernels).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _scale(x_ref, o_ref):
    o_ref[...] = 0.5 * x_ref[...]


def kernel(x, y):
    k = pl.pallas_call(_scale, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return jnp.tanh(x) * y + 0.5 * x + 0 * k
