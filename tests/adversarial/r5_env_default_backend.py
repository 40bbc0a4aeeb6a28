# Rule 16 (round 5): a kernel that picks its code by asking the machine while it is traced: honest work when
# jax.default_backend() says "cpu" (a judge without the device), a copy of its input on the TPU. Before round 5
# it was `correct` for tpu and gpu on a CPU-only judge, and the device would have traced the other branch. The
# tracer now answers jax.default_backend() with the target's backend, so the judged trace is the device's.
# Expected verdict: incorrect (target tpu).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]


def _cheap(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    body = _body if jax.default_backend() == "cpu" else _cheap
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
