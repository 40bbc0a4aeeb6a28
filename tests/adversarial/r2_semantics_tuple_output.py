# Rule 19 (round 2, class semantics): the right array, wrapped: `(out, None)` for a reference that returns a bare
#   array. The judge flattens the output tree (tree_leaves drops None), so one leaf meets one leaf and it matches.
# Class: semantics (output tree structure). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: incorrect, reason contains "structure" (output tree structure compared with the reference's).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    out = pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    return (out, None)
