# Rule 15 (round 3, class crossform): the residual risk of docs/judge.md made concrete. At import the candidate
#   reaches sys.modules (`(lambda m: m._sys)(collections)`: a private attribute read through a lambda parameter,
#   which the static check does not flag) and replaces the tracer's `mk.harness.program.with_interpret`, which the
#   tracer calls after the trace to build the CPU form. The target program keeps the candidate's real kernel
#   (x*y: wrong, but a kernel that does work, with 0 FLOPs outside); the CPU form becomes the reference.
# Class: crossform (tracer takeover after tracing). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): correct (verified_by cpu).
# Expected verdict: rejected (static: "private name" for `m._sys` on any object; tracer: the functions it calls are
#   bound before the candidate is imported and checked unchanged after the trace). Only a device run closes the
#   general case (a candidate can patch JAX's own Pallas interpreter instead).
import collections

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_tracer_program = (lambda m: m._sys)(collections).modules["mk.harness.program"]
_honest = _tracer_program.with_interpret


def _cpu_form(closed, interpret):
    if interpret is not True:  # the TPU interpreter (race checks, fallback) gets the real trace
        return _honest(closed, interpret)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
    return jax.make_jaxpr(lambda x, y: jnp.tanh(x) * y + 0.5 * x)(*structs)


_tracer_program.with_interpret = _cpu_form


def _wrong(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * y_ref[...]


def kernel(x, y):
    return pl.pallas_call(_wrong, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
