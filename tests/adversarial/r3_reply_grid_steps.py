# Rule 9 (round 3, class reply): the tracer's reply says grid_steps = "many". _run_one does
#   `int(run.programs[scale].get("grid_steps") or 0)` on it: ValueError, reported as harness_error "mk's judge
#   failed ...; please report it". (A number is also trusted: grid_steps=1e9 buys every case the 20x timeout cap.)
# Class: reply. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): harness_error ("invalid literal for int() with base 10: 'many'").
# Expected verdict: crashed, reason contains "tracer" (validate every fact of the reply in _trace: types, ranges;
#   or derive the grid from the target program's custom calls).
import collections

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_tracer = (lambda m: m._sys)(collections).modules["__main__"]
_honest = _tracer._programs


def _lying(workdir, scale, fn, structs, target):
    facts = _honest(workdir, scale, fn, structs, target)
    facts["grid_steps"] = "many"
    return facts


_tracer._programs = _lying


def _mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
