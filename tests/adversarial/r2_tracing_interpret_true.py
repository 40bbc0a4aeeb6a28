# Rule 16 (round 2, class tracing): `interpret=True` set by the candidate. Lowered for tpu, the kernel becomes plain
#   HLO (no Mosaic custom call): on a real TPU it runs as XLA ops, the "kernel" is never compiled by Mosaic, and the
#   worker's jaxpr check still sees a pallas_call.
# Class: tracing (candidate-set interpret). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "interpret" (candidate-set interpret mode is refused).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)
