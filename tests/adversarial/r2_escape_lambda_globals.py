# Rule 8 (round 2, class escape): `(lambda: 0).__globals__` with the dunder names built at run time and read with
#   `operator.attrgetter` imported by name (the static check only inspects `operator.attrgetter(...)` calls written
#   as attributes). The globals hold `__builtins__`, whose `__import__` returns the running worker (`__main__`);
#   patching its `_has_pallas` lets a pure-jnp body pass the tpu kernel requirement.
# Class: escape (builtins through a function's globals). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- the static check passes it and the cheat works.
# Expected verdict: rejected, reason contains "no pallas_call" (or a static-check finding on the attrgetter).
from operator import attrgetter

import jax.numpy as jnp
from jax.experimental import pallas as pl

_u = "_" * 2
_globals = attrgetter(_u + "globals" + _u)(lambda: 0)
_builtins = _globals[_u + "builtins" + _u]
_import = _builtins[_u + "import" + _u] if type(_builtins) is dict else attrgetter(_u + "import" + _u)(_builtins)
_import("__main__")._has_pallas = lambda *args, **kwargs: True
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
