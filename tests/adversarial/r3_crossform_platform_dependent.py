# Rule 15/16 (round 3, class crossform): `jax.lax.platform_dependent` picks the code at LOWERING time, after the
#   one trace. The TPU export (the target program, where rule 1, ablation and the FLOP count look) gets a Pallas
#   kernel that computes the wrong thing (x*y, no tanh, no 0.5x); the CPU export (where every case runs when no TPU
#   is present) gets the reference in plain jnp. Both come honestly from the same jaxpr: no tracer takeover needed.
# Class: crossform (the CPU form is not the target program). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): correct (verified_by cpu), though on a TPU it returns x*y.
# Expected verdict: rejected, reason contains "platform" (tracer fact: a `platform_index` primitive anywhere in the
#   jaxpr; judge side: the CPU form must be the target program with kernels spliced in, see the report).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _wrong(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * y_ref[...]


def _tpu(x, y):
    return pl.pallas_call(_wrong, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)


def _cpu(x, y):
    return jnp.tanh(x) * y + 0.5 * x


def kernel(x, y):
    return jax.lax.platform_dependent(x, y, tpu=_tpu, default=_cpu)
