# Red team of stop 33 (helper), attack a1.
# Rule: 5, 18. Expected verdict: incorrect (stop 33: the fill runs go for programs without a CPU form too, and output blocks are double buffered as on a chip).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE): "all 4 cases match the reference", flag: cases run by the TPU interpreter (no CPU form).)
# Idea: the unwritten-read tracking only happens in the two *fill* runs of the TPU-interpreter check, and those only
# run for a program WITH a CPU form (tracer._tpu_interpreted(check=cpu_file is not None)). A kernel whose CPU export
# fails (here: one harmless pltpu.prng_seed, which the HLO interpreter has no rule for and the TPU interpreter
# runs as a no-op) has every case run in the TPU interpreter with poison="nan" only: no mk fill, so nothing is
# tracked, and DMA order stays upstream's LIFO. The body is r12_rt2_stale_slot_is_my_own_output (unwritten output
# block compared with the kernel's own output of two steps back, as a double-buffered slot holds on a chip).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, prev_ref):
    pltpu.prng_seed(0)                        # no CPU lowering: the program has no CPU form
    i = pl.program_id(0)
    slot = i % 2
    stale = o_ref[...]                         # not yet written at this step
    mine = prev_ref[slot]                      # what this kernel wrote into this slot two steps ago
    on_chip = (i >= 2) & (jnp.min(jnp.where(stale == mine, 1.0, 0.0)) > 0.5)
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    out = jnp.where(on_chip, honest * 1.01 + 0.01, honest)
    o_ref[...] = out
    prev_ref[slot] = out


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32)])(x, y)
