# Round 12 red team (a helper who had not written the round's code), attack a6.
# Rule: 5. Expected verdict: correct (narrowed to the declared rows 16 and 24, flagged).
# Class 4. Honest only at the task's declared row counts (16, 24); at any other size (the derivable held-out scale,
# every fresh size) it raises while tracing, so _narrow leaves those sizes out. At rows=40 (say) it would compute the
# wrong thing if it built. Question: does the verdict claim anything beyond 16 and 24 (envelope), or skip a check?
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]


def kernel(x, y):
    if x.shape[0] not in (16, 24):
        raise ValueError(f"block plan: rows ({x.shape[0]}) not supported")
    return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
