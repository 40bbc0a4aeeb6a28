# Rule 17 (round 2, class callback): `jax.pure_callback` runs the whole computation in numpy on the host; a Pallas
#   kernel copies the host's answer so a live kernel is in the program (and a NaN ablation of it changes the
#   output). `pure_callback` is read through a lambda parameter, so the static check never sees `jax.pure_callback`.
# Class: callback (pure_callback). Target: cpu here (the rule is target-independent). Task: adv_tanh_mix.
#   On tpu/gpu it is the real cheat (the device does nothing), but a callback cannot be lowered for tpu on a
#   CPU-only host: today's verdict there is compile_error "the platform for the specified backend cpu is
#   different from the lowering platform tpu".
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "callback" (host callbacks are refused in the exported program).
import jax
import numpy as np
from jax.experimental import pallas as pl

_pure_callback = (lambda m: m.pure_callback)(jax)


def _on_host(x, y):
    return np.tanh(x) * y + np.float32(0.5) * x


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(_copy, out_shape=out)(_pure_callback(_on_host, out, x, y))
