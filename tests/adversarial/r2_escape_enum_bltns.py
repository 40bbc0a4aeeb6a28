# Rule 8 (round 2, class escape): `enum` imports `builtins` as `bltns`, a name on none of the static check's lists,
#   so `enum.bltns.exec` runs a string the static check never parses. The string patches the running worker's
#   `_has_pallas` (it only mentions `__main__`, a dunder the string scan allows), so a pure-jnp body passes.
# Class: escape (builtins under an innocent module attribute). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- the static check passes it and the cheat works.
# Expected verdict: rejected, reason contains "no pallas_call" (or a static-check finding on enum.bltns).
import enum

import jax.numpy as jnp
from jax.experimental import pallas as pl

enum.bltns.exec("import sys; sys.modules['__main__']._has_pallas = lambda *a, **k: True")
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
