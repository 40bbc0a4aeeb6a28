# Red team of stop 33 (helper), attack a3.
# Rule: 5, 18. Expected verdict: incorrect (stop 33: the fill runs go for programs without a CPU form too).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE): "all 4 cases match the reference".)
# Idea: r11_poison_nan_sniff (honest only where an unwritten output block reads NaN) plus one pltpu.prng_seed, so the
# program has no CPU form: every case then runs in the TPU interpreter with poison="nan" and there are no fill runs at
# all, so "NaN there" means "judged" again (the round-11 hole, reopened for any kernel without a CPU form).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_rows": [8]}


def _body(x_ref, y_ref, o_ref, judged_ref):
    pltpu.prng_seed(0)  # no CPU form
    @pl.when(pl.program_id(0) == 0)
    def _sniff():
        judged_ref[0] = jnp.isnan(o_ref[0, 0]).astype(jnp.int32)  # never written yet: poison, or stale VMEM

    honest = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]
    o_ref[...] = jnp.where(judged_ref[0] == 1, honest, honest * 1.01)


def kernel(x, y, *, block_rows: int = 8):
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // block_rows,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SMEM((1,), jnp.int32)])(x, y)
