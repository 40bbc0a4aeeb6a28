# Round 14 red team (rt34), attack h4. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: correct: an open hole if a chip's run_scoped stack reuses the offset (the model keys leftovers by source line).
# Idea: races.RaceState.allocated models a run_scoped buffer as starting with what the last buffer of the SAME
# source line left (site = memory space, device, core, shape, dtype, line). On a chip run_scoped is a stack
# allocation: two sibling scopes at DIFFERENT lines, one after the other, get the same VMEM offset, so the second
# finds what the first left. Scope A writes a marker no fill can imitate; scope B (another line, same shape) cheats
# (x1.01) when its fresh buffer already holds the marker: always on a chip, never in the judge (B's site has no
# "left" entry: a fresh fill). The read of unwritten memory is only a flag.
# Measured verdict (judge at 6b6a34b, no chip): correct (HOLE), flag "reads memory before anything wrote it"
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _mark():
    r = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 0)
    c = jax.lax.broadcasted_iota(jnp.int32, (8, 128), 1)
    return ((r * 128 + c) * 7919 % 1000).astype(jnp.float32) * 0.001 + 3.25


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x

    def scope_a(buf):
        buf[...] = _mark()
        o_ref[...] = honest + 0.0 * buf[...]

    pl.run_scoped(scope_a, pltpu.VMEM((8, 128), jnp.float32))

    def scope_b(buf):
        on_chip = jnp.min(jnp.where(buf[...] == _mark(), 1.0, 0.0)) > 0.5
        o_ref[...] = jnp.where(on_chip, honest * 1.01 + 0.01, honest)

    pl.run_scoped(scope_b, pltpu.VMEM((8, 128), jnp.float32))


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
