# Round 12, second red team (a helper who had not written the fixes), attack b1.
# Rule: 16. Expected verdict: rejected.
# Attack on fix 2 (lowerings._code_objects): a NEW primitive whose lowering rules are a CLASS (cpu) and an
# INSTANCE whose __call__ is inherited from a base class (tpu). _code_objects returns [] for any `type` ("a class
# is not run by being referenced") although mlir calls rule(ctx, *args) -> runs the class's __new__ (candidate
# code); and for a callable object it looks only at type(value).__dict__['__call__'] (not the MRO) and vars(value).
# So both rules pass _from_library with no code object at all. Chip: the epilogue multiplies by 1.01; the CPU form
# (what the cases check) is the identity.
import jax
import jax.numpy as jnp
from jax.interpreters import mlir
from jax.experimental import pallas as pl

_Prim = type(jax.lax.neg_p)
tweak_p = _Prim("tweak_epilogue")
tweak_p.def_abstract_eval(lambda a: a)


def _scaled(a):
    return a * 1.01


class _CpuRule:
    def __new__(cls, ctx, a):
        return [a]


class _Base:
    def __call__(self, ctx, a):
        return mlir.lower_fun(_scaled, multiple_results=False)(ctx, a)


class _TpuRule(_Base):
    pass


mlir.register_lowering(tweak_p, _CpuRule, platform="cpu")
mlir.register_lowering(tweak_p, _TpuRule(), platform="tpu")


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    out = pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
    return tweak_p.bind(out)
