# Rule 15 / 2 (round 2, class nowork): a silent fallback written as dataflow, with no try/except for the static
#   check to see: use the kernel's output only where it agrees with a jnp recomputation, else the jnp value
#   (`where(ok, kernel, fallback)`). The kernel is honest, so every case matches; any kernel bug would be hidden.
# Class: nowork. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "does no work" (kernel output -> NaN selects the fallback: the
#   result does not change; the FLOP count outside kernels also sees the recomputation).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    k = pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    fallback = jnp.tanh(x) * y + 0.5 * x
    ok = jnp.abs(k - fallback) <= 1e-6 * (1 + jnp.abs(fallback))  # False for NaN
    return jnp.where(ok, k, fallback)
