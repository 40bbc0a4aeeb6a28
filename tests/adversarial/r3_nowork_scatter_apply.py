# Rule 15 (round 3, class nowork): the whole reference as the update computation of a scatter. `x.at[...].apply(f)`
#   lowers to a stablehlo.scatter whose region applies f to every element; program.flops costs an op with regions
#   as the cost of its regions ONCE (scalar ops: 4 FLOPs for 2048 elements). Packing x and y into one complex array
#   lets a unary f compute tanh(x)*y + 0.5x (lax.complex and .real are not costed either). Reduce, reduce_window,
#   sort, select_and_scatter and map bodies have the same flaw.
# Class: nowork (FLOPs hidden from the counter). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): correct (outside share 0%).
# Expected verdict: rejected, reason contains "FLOPs run outside the kernels" (cost a scatter's region once per
#   update element, a reduce/reduce_window/sort body once per element combined, and treat unknown ops with regions
#   as region cost x result size).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def _whole_task(v):  # one element: x in the real part, y in the imaginary part
    return jax.lax.complex(jnp.tanh(v.real) * v.imag + 0.5 * v.real, v.imag)


def kernel(x, y):
    # the whole reference as the update computation of a scatter over every element: costed once, not per element
    answer = jax.lax.complex(x, y).at[...].apply(_whole_task).real
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(answer)
