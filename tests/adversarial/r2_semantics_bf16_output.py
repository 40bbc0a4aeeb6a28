# Rule 19 (round 2, class semantics): bf16 output for an fp32 reference, on the loose-tolerance task (atol 0.1:
#   bf16 rounding of 0.05*tanh(x) is ~1e-4, so the values pass; halves the output bytes).
# Class: semantics (wrong dtype). Target: tpu. Task: adv_small.
# Today (HEAD f7ab8eb): incorrect -- "dtype bfloat16 differs from the reference's float32" (the per-leaf dtype
#   check already catches it; kept so the rewrite keeps that check).
# Expected verdict: incorrect, reason contains "bfloat16" (the output dtype differs from the reference's float32).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _small(x_ref, o_ref):
    o_ref[...] = (0.05 * jnp.tanh(x_ref[...])).astype(o_ref.dtype)


def kernel(x):
    return pl.pallas_call(_small, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.bfloat16))(x)
