# Rule 16 / 7 (round 2, class escape): monkeypatch `jax.experimental.pallas.pallas_call` so every kernel is built
#   with `interpret=True`, while the source never says so (a scan of the source for `interpret=` finds nothing).
#   The module is reached as `(pl,)[0]`, which the static check does not treat as the imported module, so the
#   assignment is not "patching an imported module". Same effect as r2_tracing_interpret_true.py.
# Class: escape (monkeypatch pallas_call). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "interpret" (read from the traced program's pallas_call params,
#   not from the source).
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_pallas = (pl,)[0]
_pallas.pallas_call = functools.partial(_pallas.pallas_call, interpret=True)


def _tanh_mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(_tanh_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
