# Round 11 (issue 22, item 2): a kernel that reads its output block at grid step 0, before writing it. Both
# interpreters filled unwritten memory with NaN, so "NaN there" meant "running in the judge": the kernel remembers
# that in a scalar scratch, computes the task honestly only then and returns 1% too much otherwise (on a chip the
# block holds stale, finite VMEM). The TPU-interpreter check now fills unwritten memory with zeros while the cases'
# HLO interpreter fills it with NaN: the two disagree.
# Rule: 5/18 (the TPU-interpreter check). Expected verdict: incorrect.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_rows": [8]}


def _body(x_ref, y_ref, o_ref, judged_ref):
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
