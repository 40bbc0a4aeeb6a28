# Round 12: the Triton lowering table, as r12_hook_mosaic_table does for Mosaic: tanh's Triton rule points at exp's,
# so the GPU kernel computes exp(x) * y + 0.5 x; the cases (interpret mode) never consult the table.
# Rule: 1b (one program judged). Expected verdict: rejected (before: correct).
import jax
import jax.numpy as jnp
from jax._src.pallas.triton import lowering as triton
from jax.experimental import pallas as pl

triton.triton_lowering_rules[jax.lax.tanh_p] = triton.triton_lowering_rules[jax.lax.exp_p]


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
