# Rule 8 (round 2, class escape): the classic -- `getattr(__builtins__, "ev" + "al")`, then eval'd code the static
#   check never sees patches the worker's `_has_pallas` so a pure-jnp body passes the tpu kernel requirement.
# (In an imported module `__builtins__` is the builtins dict, so the dict case is handled too.)
# Class: escape (builtins through computed names). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): rejected by the static check ("__builtins__ reaches interpreter internals").
# Expected verdict: rejected, reason contains "__builtins__" (static check), or, should that line fall,
#   "no pallas_call" (the exported program has no kernel).
import jax.numpy as jnp
from jax.experimental import pallas as pl

_b = __builtins__
_eval = _b["ev" + "al"] if type(_b) is dict else getattr(_b, "ev" + "al")
_eval("__import__('sys').modules['__main__'].__setattr__('_has_pallas', lambda *a, **k: True)")
_KERNEL_API = pl.pallas_call  # never called


def kernel(x, y):
    return jnp.tanh(x) * y + 0.5 * x
