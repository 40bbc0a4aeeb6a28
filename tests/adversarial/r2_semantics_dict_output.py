# Rule 19 (round 2, class semantics): the right array in a dict, `{"out": out}`, for a reference that returns a
#   bare array; the judge compares flattened leaves only.
# Class: semantics (output tree structure). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: incorrect, reason contains "structure".
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return {"out": pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)}
