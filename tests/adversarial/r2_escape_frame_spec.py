# Rule 8 (round 2, class escape): `sys._getframe` through an import alias (`collections` keeps `sys` as `_sys`,
#   read through a lambda parameter), then `f_back` (name built at run time, read with an attrgetter imported by
#   name) up to the worker's `run()` frame, whose local `spec` dict is edited: `require_pallas = False`. The
#   worker then skips its kernel check and a pure-jnp body passes on tpu.
# Class: escape (frame objects). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- the static check passes it and the cheat works.
# Expected verdict: rejected, reason contains "no pallas_call" (the trusted process decides what is required).
import collections
from operator import attrgetter

import jax.numpy as jnp
from jax.experimental import pallas as pl

_back, _locals = attrgetter("f_" + "back"), attrgetter("f_" + "locals")
_frame = (lambda m: m._sys)(collections)._getframe(0)
while _frame is not None:
    if "spec" in _locals(_frame) and "chan" in _locals(_frame):
        _locals(_frame)["spec"]["require_pallas"] = False
    _frame = _back(_frame)
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
