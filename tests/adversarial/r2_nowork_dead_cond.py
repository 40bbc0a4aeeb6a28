# Rule 15 (round 2, class nowork): an honest kernel in a `lax.cond` branch that is never taken (inputs are never
#   above 1e30); the taken branch is plain jnp. The worker's liveness walk enters both branches and finds the
#   kernel; at run time it never executes.
# Class: nowork. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "does no work" (replacing the kernel's output by NaN leaves the
#   result unchanged; the FLOP count outside kernels would catch it too).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def _with_kernel(x, y):
    return pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)


def _with_jnp(x, y):
    return jnp.tanh(x) * y + 0.5 * x


def kernel(x, y):
    return jax.lax.cond(jnp.max(jnp.abs(x)) > 1e30, _with_kernel, _with_jnp, x, y)
