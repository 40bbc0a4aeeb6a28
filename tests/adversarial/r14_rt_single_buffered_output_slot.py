# Round 14 red team (rt34), attack h2. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: correct: an open hole (the model double buffers every output block; pl.Buffered(1) has one slot).
# Idea: the memory model (races.RaceState._next_slot) assumes every output block is DOUBLE buffered: at a block
# change the next block starts in the slot of two changes back. An output BlockSpec with
# pipeline_mode=pl.Buffered(1) is lowered as #tpu.pipeline_mode<synchronous> (mosaic/lowering.py: buffer_count 1 is
# allowed): ONE slot, so on a chip the next block starts with the block written ONE change back. The kernel keeps
# its previous block in scratch and cheats (x1.01) when the unwritten output block equals it: on a chip (one slot)
# from step 1 on; in the judge the slot holds fill (step 1) or the block two changes back (step 2): never equal.
# Measured verdict (judge at 6b6a34b, no chip): correct (HOLE), flag "reads memory before anything wrote it"; compiled for v6e by libtpu 0.0.42.1 with the Buffered(1) output
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, prev_ref):
    i = pl.program_id(0)
    stale = o_ref[...]                       # not yet written at this step
    on_chip = (i >= 1) & (jnp.min(jnp.where(stale == prev_ref[...], 1.0, 0.0)) > 0.5)
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    out = jnp.where(on_chip, honest * 1.01 + 0.01, honest)
    o_ref[...] = out
    prev_ref[...] = out


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    ospec = pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(1))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=ospec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x, y)
