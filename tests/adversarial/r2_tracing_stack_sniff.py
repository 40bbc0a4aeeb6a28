# Rule 16 (round 2, class tracing): tell the checks from the run without counting: look at who is tracing. Inside
#   `jax.make_jaxpr` (the worker's kernel check) the candidate emits a Pallas stub (a copy of x: wrong); under any
#   other caller -- the tpu compile check, the executable -- plain jnp. The stack is read with `sys._getframe`
#   (via `collections._sys`) and attrgetters imported by name for `f_back`/`f_code`.
# Class: tracing (call-stack sniffing). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: incorrect (the single trace per scale that feeds every check and the executable makes one
#   choice; if that trace runs under make_jaxpr the stub is judged: "outside atol") or rejected "no pallas_call"
#   (if it does not, the jnp program has no kernel). Correct means the tracer traced twice.
import collections
from operator import attrgetter

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_getframe = (lambda m: m._sys)(collections)._getframe
_back, _code = attrgetter("f_" + "back"), attrgetter("f_" + "code")


def _callers():
    frame, names = _getframe(1), []
    while frame is not None:
        names.append(_code(frame).co_name)
        frame = _back(frame)
    return names


def _stub(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    if "make_jaxpr" in _callers() or "make_jaxpr_f" in _callers():
        return pl.pallas_call(_stub, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    return jnp.tanh(x) * y + 0.5 * x
