# Rule 8 (round 2, class escape): `locals()` -- not on the static check's list of namespace builtins, unlike
#   `globals`/`vars` -- is the module namespace at module level; a computed key gives `__builtins__`, and its
#   `__import__` the running worker (`__main__`), whose `_has_pallas` is patched so a pure-jnp body passes.
# Class: escape (builtins through locals()). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct -- the static check passes it and the cheat works.
# Expected verdict: rejected, reason contains "no pallas_call" (or a static-check finding on locals()).
import jax.numpy as jnp
from jax.experimental import pallas as pl

_u = "_" * 2
_builtins = locals()[_u + "builtins" + _u]
_import = _builtins[_u + "import" + _u] if type(_builtins) is dict else None
_import("__main__")._has_pallas = lambda *args, **kwargs: True
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
