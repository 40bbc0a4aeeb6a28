# Rule 15 (round 3, class nowork): the epilogue-matmul trick with the dot wrapped in `jax.lax.composite`. The
#   exported StableHLO holds a `stablehlo.composite` op whose body is a separate function named only by its
#   `decomposition` attribute; program.flops follows func.call but not composites, so the 1.05e6-FLOP matmul
#   counts 0 outside the kernel. (JAX emits composites itself for erf, sinh, cosh, asinh, atanh, acos, top_k ...:
#   all count 0 today, in candidates and references alike.) The kernel only copies the product.
# Class: nowork (FLOPs hidden from the counter). Target: tpu. Task: adv_matmul.
# Today (HEAD 560b111): correct (outside share 0%).
# Expected verdict: rejected, reason contains "FLOPs run outside the kernels" (flops() must cost a composite as
#   its decomposition function).
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


@functools.partial(jax.lax.composite, name="r3.matmul")
def _matmul(x, y):
    return jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST)


def kernel(x, y):
    product = _matmul(x, y)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(product.shape, product.dtype))(product)
