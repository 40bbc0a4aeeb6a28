# Rule 17 (round 2, class callback): `jax.experimental.io_callback` computes the answer on the host (numpy); a
#   Pallas kernel copies it. `io_callback` is read through a lambda parameter from `jax.experimental`, so the
#   static check never sees the denied name `jax.experimental.io_callback`.
# Class: callback (io_callback). Target: cpu here (the rule is target-independent). Task: adv_tanh_mix.
#   On tpu/gpu it is the real cheat (the device does nothing), but a callback cannot be lowered for tpu on a
#   CPU-only host: today's verdict there is compile_error "the platform for the specified backend cpu is
#   different from the lowering platform tpu".
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "callback".
import jax
import jax.experimental
import numpy as np
from jax.experimental import pallas as pl

_io_callback = (lambda m: m.io_callback)(jax.experimental)


def _on_host(x, y):
    return np.tanh(x) * y + np.float32(0.5) * x


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(_copy, out_shape=out)(_io_callback(_on_host, out, x, y))
