# Round 12 red team (a helper who had not written the round's code), attack a1.
# Rule: 16. Expected verdict: rejected.
# Class 3. A NEW primitive (its class reached as type(jax.lax.neg_p), no jax.extend import), with lowering rules
# built by JAX's own mlir.lower_fun: the rule's code object lives in jax/_src/interpreters/mlir.py, so
# lowerings.changed() treats it as "a library primitive", though the closure holds the candidate's functions.
# CPU rule: the whole task (tanh(a)*b + 0.5a). TPU rule: returns a (the copy). The kernel is a copy of x.
# On the chip: output = x (wrong). In the CPU form the cases run: the right answer.
import jax
import jax.numpy as jnp
from jax.interpreters import mlir
from jax.experimental import pallas as pl

_Prim = type(jax.lax.neg_p)
mix_p = _Prim("mix_epilogue")
mix_p.def_abstract_eval(lambda a, b: a)
mlir.register_lowering(mix_p, mlir.lower_fun(lambda a, b: jnp.tanh(a) * b + 0.5 * a, multiple_results=False), platform="cpu")
mlir.register_lowering(mix_p, mlir.lower_fun(lambda a, b: a, multiple_results=False), platform="tpu")


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    copied = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return mix_p.bind(copied, y)
