# Red team of stop 33 (helper), attack a5 (documented as not closed in README stop 33; measured here).
# Rule: 5, 18. Expected verdict: incorrect (stop 33: output blocks are double buffered as on a chip, so the tell fires).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE, documented as open in README stop 33).)
# Idea: a masked store whose mask is all False writes nothing, yet the interpreter's swap reports its whole range to
# the race state as written (races.RaceState marks mask[range] = False). The block then reads as "written" and the
# stale-slot comparison of r12_rt2_stale_slot_is_my_own_output goes through unseen.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, prev_ref, flag_ref):
    i = pl.program_id(0)
    slot = i % 2
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    nothing = jnp.zeros(honest.shape, jnp.bool_)
    pltpu.store(o_ref, honest, mask=nothing)   # writes nothing, counts as written
    stale = o_ref[...]
    flag_ref[0] = 0

    @pl.when(i >= 2)
    def _():
        same = jnp.min(jnp.where(stale == prev_ref[slot], 1.0, 0.0)) > 0.5
        flag_ref[0] = same.astype(jnp.int32)

    on_chip = flag_ref[0] == 1
    out = jnp.where(on_chip, honest * 1.01 + 0.01, honest)
    o_ref[...] = out
    prev_ref[slot] = out


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32), pltpu.SMEM((1,), jnp.int32)])(x, y)
