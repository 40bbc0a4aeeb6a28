# Round 14 red team (rt34), attack h5. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: correct: an open hole (the model double buffers every input block; pl.Buffered(1) has one slot).
# Idea: races.RaceState._copied_in gives a partial INPUT block's padding the slot's rows of two copies back (double
# buffering). With pipeline_mode=pl.Buffered(1) on the input (#tpu.pipeline_mode<synchronous>) a chip has ONE slot:
# the padding holds the rows of the PREVIOUS block. x comes in 16-row blocks (rows 24: block 1 has 8 rows of padding;
# rows 40: block 2 too); the kernel keeps each x block in scratch and cheats (x1.01) on the block's valid rows when its
# padding equals the previous block's rows 8..15: on a chip (one slot) always, in the judge never (fill at the first
# padded copy, the block of two copies back after).
# Measured verdict (judge at 6b6a34b, no chip): correct (HOLE), flag "reads memory before anything wrote it" (of prev_ref at step 0); compiled for v6e with the Buffered(1) input
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, prev_ref):
    i = pl.program_id(0)
    x = x_ref[...]
    pad = x[8:16]
    on_chip = (i >= 1) & (jnp.min(jnp.where(pad == prev_ref[8:16], 1.0, 0.0)) > 0.5)
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    o_ref[...] = jnp.where(on_chip, honest * 1.01 + 0.01, honest)
    prev_ref[...] = x


def kernel(x, y):
    n = pl.cdiv(x.shape[0], 16)
    xspec = pl.BlockSpec((16, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(1))
    spec = pl.BlockSpec((16, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(n,), in_specs=[xspec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32)])(x, y)
