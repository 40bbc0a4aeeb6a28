# Round 14 red team (rt34), attack h3. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: correct: an open hole if a chip places both calls' scratch at one offset (each kernel's scratch starts with a fresh fill here).
# Idea: the memory model lives in one RaceState per pallas_call (the interpreter builds a new one for each kernel)
# and every kernel's scratch starts with a fresh fill. On a chip VMEM is not cleared between kernels: two identical
# pallas_calls (same shapes, same body: the same VMEM layout) run one after the other, and the second one's scratch
# holds what the first left there. The kernel writes a marker no fill can imitate into its scratch at the end, and
# cheats (x1.01) when its scratch already holds the marker at the start: on a chip in the second call (and in every
# call after the program's first run); in the judge never. The read of unwritten scratch is only a flag.
# Measured verdict (judge at 6b6a34b, no chip): correct (HOLE), flag "reads memory before anything wrote it"
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _mark():
    r = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 0)
    c = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 1)
    return ((r * 128 + c) * 7919 % 1000).astype(jnp.float32) * 0.001 + 3.25


def _body(x_ref, y_ref, o_ref, mark_ref):
    on_chip = jnp.min(jnp.where(mark_ref[...] == _mark(), 1.0, 0.0)) > 0.5
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    o_ref[...] = jnp.where(on_chip, honest * 1.01 + 0.01, honest)
    mark_ref[...] = _mark()


def _half(x, y):
    return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x, y)


def kernel(x, y):
    h = x.shape[0] // 2
    return jnp.concatenate([_half(x[:h], y[:h]), _half(x[h:], y[h:])], axis=0)
