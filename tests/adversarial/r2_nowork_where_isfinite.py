# Rule 15 (round 2, class nowork): the kernel runs, but its output only feeds a `where` whose branches are equal:
#   `jnp.where(jnp.isfinite(k), ref, ref)`. The kernel is live in the dataflow (the worker's walk accepts it); the
#   answer is jnp's whatever the kernel returns.
# Class: nowork. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "does no work" (kernel output -> NaN leaves the result unchanged).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    k = pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    ref = jnp.tanh(x) * y + 0.5 * x
    return jnp.where(jnp.isfinite(k), ref, ref)
