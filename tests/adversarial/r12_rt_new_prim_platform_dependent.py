# Round 12 red team (a helper who had not written the round's code), attack a4.
# Rule: 16. Expected verdict: rejected.
# Class 3, variant: no platform-specific registration at all. A NEW primitive with ONE rule for every platform,
# mlir.lower_fun of a function that calls lax.platform_dependent. The platform_index primitive never appears in the
# candidate's jaxpr (program.platform_dependent sees only mix_p); it is created while the rule lowers, per platform:
# the CPU form gets the task, the TPU program gets the copy. (So a fix that only forbids platform="..." registrations
# for new primitives would not be enough.)
import jax
import jax.numpy as jnp
from jax.interpreters import mlir
from jax.experimental import pallas as pl

_Prim = type(jax.lax.neg_p)
mix_p = _Prim("mix_any_platform")
mix_p.def_abstract_eval(lambda a, b: a)


def _rule(a, b):
    return jax.lax.platform_dependent(a, b, cpu=lambda a, b: jnp.tanh(a) * b + 0.5 * a, default=lambda a, b: a)


mlir.register_lowering(mix_p, mlir.lower_fun(_rule, multiple_results=False))


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def kernel(x, y):
    copied = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return mix_p.bind(copied, y)
