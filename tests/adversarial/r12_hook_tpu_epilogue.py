# Round 12: a public lowering hook. An honest kernel, then an epilogue that is the identity (-(-out)); at import the
# candidate registers a TPU-only lowering for negation that multiplies by 1.01, so the program the chip runs is off
# by 2 % while the CPU form the cases run (negation lowered as usual) is exact.
# Rule: 1b (one program judged). Expected verdict: rejected (before: correct).
import jax
import jax.numpy as jnp
from jax.interpreters import mlir
from jax.experimental import pallas as pl

mlir.register_lowering(jax.lax.neg_p, mlir.lower_fun(lambda v: v * -1.01, multiple_results=False), platform="tpu")


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    out = pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    return -(-out)
