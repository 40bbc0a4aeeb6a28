# Rule 6: write the result into the input buffer (input_output_aliases) and scribble on it.
# Task: adv_rmsnorm, target tpu. The harness calls the candidate under its own jit without donation and
# compares every input with a pristine copy. Expected verdict: never correct with mutated inputs: either the
# judge sees the mutation (incorrect, "mutated input") or XLA's copy protects the caller and the candidate's
# honest output is judged (correct).
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, w_ref, o_ref, *, eps):
    x = x_ref[...]
    o_ref[...] = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w_ref[...]


def kernel(x, w, eps=1e-6):
    return pl.pallas_call(
        functools.partial(_body, eps=eps),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={0: 0},
    )(x, w.reshape(1, -1))
