# Round 12, second red team (a helper who had not written the fixes), attack b5.
# Rule: 5, 18. Expected verdict: incorrect (stop 33: the TPU interpreter's output blocks are double buffered as on a chip,
# so the slot holds the kernel's own block of two changes back and the tell fires). Before: correct, an open hole.
# Attack on fix 1 (the fills), no data needed: on a chip, Mosaic's pipeline double-buffers the output block in VMEM,
# so at grid step i >= 2 the never-yet-written output buffer holds EXACTLY what this kernel wrote at step i-2 (the
# slot was written, DMA'd out, and never cleared). Every judged run fills that buffer with something else (NaN in
# the cases and the ordered run; a secret family in shuffled/garbage), which never equals the kernel's own earlier
# output. The kernel keeps what it wrote per slot in a scratch and, when the stale block equals it (a chip), writes
# 1.01x. Rows 24 and the fresh size 40 with 8-row blocks have >= 3 steps.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, prev_ref):
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
