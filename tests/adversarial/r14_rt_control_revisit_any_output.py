# Round 14 red team (rt34), false-positive probe fp1. Task: tanh. Rules 5, 18.
# Control. Expected verdict: incorrect: an open false positive (an honest non-consecutive revisit declared with pl.Buffered(1, revisit=ANY); the interpreter raises "Revisited block").
# Idea: an HONEST kernel that revisits output blocks non-consecutively and declares it:
# pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY) ("additional DMAs as needed to restore the buffer state":
# Mosaic reloads the block from HBM on a revisit, lowered as #tpu.revisit_mode<any>). Grid (2, blocks): pass 0 writes
# tanh(x)*y into every block, pass 1 revisits each block, reads it back and adds 0.5*x. Right on a chip; the TPU
# interpreter ignores pipeline_mode (its _check_for_revisiting raises, and mk's model would hand the revisit the
# double-buffered slot of two changes back, not the block reloaded from HBM).
# Measured verdict (judge at 6b6a34b, no chip): incorrect (FALSE POSITIVE): TPU-interpreter check raised RuntimeError: Revisited block ... of output 0 (compiled for v6e with #tpu.revisit_mode<any>)
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref):
    p = pl.program_id(0)

    @pl.when(p == 0)
    def _():
        o_ref[...] = jnp.tanh(x_ref[...]) * y_ref[...]

    @pl.when(p == 1)
    def _():
        o_ref[...] = o_ref[...] + 0.5 * x_ref[...]


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda p, i: (i, 0))
    ospec = pl.BlockSpec((8, 128), lambda p, i: (i, 0),
                         pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY))
    return pl.pallas_call(_body, grid=(2, x.shape[0] // 8), in_specs=[spec, spec], out_specs=ospec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")))(x, y)
