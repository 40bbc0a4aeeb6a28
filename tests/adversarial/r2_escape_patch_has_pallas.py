# Rule 1 / 7 (round 2, class escape): monkeypatch the worker's own kernel check, `_has_pallas`.
# Trick: `collections._sys`, read through a lambda parameter (the static check sees `m._sys` on an unknown object,
#   not a module chain), is `sys`; `sys.modules["__main__"]` is the running worker (`python -m mk.harness.worker`),
#   whose global `_has_pallas` is looked up only after the candidate was imported. The body is plain jnp; the unused
#   `pl.pallas_call` reference satisfies the source-level kernel check.
# Class: escape (monkeypatch worker). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- a pure-jnp candidate passes the tpu kernel requirement.
# Expected verdict: rejected, reason contains "no pallas_call" (the trusted process inspects the exported program;
#   the tracer's patched globals decide nothing).
import collections

import jax.numpy as jnp
from jax.experimental import pallas as pl

_sys = (lambda m: m._sys)(collections)
_sys.modules["__main__"]._has_pallas = lambda *args, **kwargs: True
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
