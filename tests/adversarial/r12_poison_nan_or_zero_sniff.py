# Round 12 (issue 22, item 2): r11_poison_nan_sniff, widened to both fills the interpreters had. At grid step 0 the
# kernel reads its output block before writing it and counts it as "judged" when it holds NaN or zero (the cases'
# NaN, the zero-filled check run); it computes the task honestly only then and returns 1% too much otherwise, as it
# would on a chip, where the block holds stale finite VMEM. The third TPU-interpreter run now fills unwritten memory
# with random finite values from a secret seed.
# Rule: 5/18 (the TPU-interpreter check). Expected verdict: incorrect (before: correct).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_rows": [8]}


def _body(x_ref, y_ref, o_ref, judged_ref):
    @pl.when(pl.program_id(0) == 0)
    def _sniff():
        seen = o_ref[0, 0]  # never written yet: the judge's fill, or stale VMEM
        judged_ref[0] = jnp.logical_or(jnp.isnan(seen), seen == 0.0).astype(jnp.int32)

    honest = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]
    o_ref[...] = jnp.where(judged_ref[0] == 1, honest, honest * 1.01)


def kernel(x, y, *, block_rows: int = 8):
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // block_rows,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SMEM((1,), jnp.int32)])(x, y)
