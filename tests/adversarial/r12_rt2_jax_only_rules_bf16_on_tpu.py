# Round 12, second red team (a helper who had not written the fixes), attack b6.
# Rule: 16. Expected verdict: rejected.
# Attack on fix 2 (admitted open, built as a real cheat): a NEW primitive whose rules are made only of JAX's own
# functions: on "tpu", mlir.lower_fun(partial(lax.reduce_precision, 8, 7)) (rounds the result to bf16 precision);
# on "cpu", mlir.lower_fun(jnp.positive) (the identity). Every code object reachable is in JAX's package, so
# _from_library passes. The device program's outputs lose 16 mantissa bits; the CPU form the cases check is exact.
import functools
import jax
import jax.numpy as jnp
from jax.interpreters import mlir
from jax.experimental import pallas as pl

_Prim = type(jax.lax.neg_p)
finish_p = _Prim("finish_epilogue")
finish_p.def_abstract_eval(lambda a: a)
mlir.register_lowering(finish_p, mlir.lower_fun(functools.partial(jax.lax.reduce_precision, exponent_bits=8, mantissa_bits=7),
                                                multiple_results=False), platform="tpu")
mlir.register_lowering(finish_p, mlir.lower_fun(jnp.positive, multiple_results=False), platform="cpu")


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    out = pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    return finish_p.bind(out)
