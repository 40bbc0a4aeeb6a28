# Rule 9 (round 3, class reply): the tracer's reply names, as the target program, a regular file of its work dir
#   that is not a program (candidate.py). The name passes the judge's checks (no "/", no leading dot, regular
#   file), `export.deserialize` raises on it, and the generic handler in evaluate() turns that into
#   harness_error "mk's judge failed ...; please report it" with a logged traceback: the candidate's lie is
#   recorded as mk's bug. Reached by patching the tracer's own `_programs` (sys.modules["__main__"]). Naming a
#   sparse file of 2 GiB - 1 instead (os.truncate: no disk used) costs the judge 4.3 GB of memory before the same
#   harness_error (_read_regular reads it whole, then bytearray copies it).
# Class: reply. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): harness_error ("unpack_from requires a buffer of at least ...").
# Expected verdict: crashed, reason contains "tracer" (wrap the deserialize of each tracer file: an unreadable
#   program is the tracer's failure, not mk's; cap the size far below 2 GiB and read it once, without the copy).
import collections

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_tracer = (lambda m: m._sys)(collections).modules["__main__"]  # mk.harness.tracer, run with -m
_honest = _tracer._programs


def _lying(workdir, scale, fn, structs, target):
    facts = _honest(workdir, scale, fn, structs, target)
    facts["target_file"] = "candidate.py"
    return facts


_tracer._programs = _lying


def _mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
