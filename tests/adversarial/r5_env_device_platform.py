# Rule 16 (round 5): a kernel that asks the machine at import: honest work when jax.devices()[0].platform
# says "cpu" (a judge without the device), a copy of its input elsewhere. Before round 5 it was `correct` for
# tpu and gpu on a CPU-only judge. While the candidate is imported and traced, the tracer's jax.devices() reports
# the target's platform (devices asked for by backend name stay as they are).
# Expected verdict: incorrect (target gpu).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ON_CPU = jax.devices()[0].platform == "cpu"


def _body(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]


def _cheap(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    return pl.pallas_call(_body if ON_CPU else _cheap, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
