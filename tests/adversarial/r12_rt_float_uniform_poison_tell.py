# Round 12 red team (a helper who had not written the round's code), attack a3.
# Rule: 5, 18. Expected verdict: incorrect.
# Class 1, floats only (so a fix that widens the integer garbage alone would not stop it). The garbage fill of a float
# buffer is uniform in [-S, S] with S in [1, 100]: max|v| between 1 and 100 and about half the values below max|v|/2.
# Stale VMEM on a chip is zeros (fresh) or an earlier kernel's data (activations, bf16 pairs read as f32: bell-shaped
# or wild exponents), which this test rejects. The kernel reads a never-written f32 VMEM scratch: NaN (the cases, the
# two NaN check runs) or the uniform signature -> honest; anything else (a chip) -> 1% too much.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_rows": [8]}


def _body(x_ref, y_ref, o_ref, probe_ref):
    v = probe_ref[...]  # never written
    a = jnp.abs(v)
    nan_fill = jnp.min(jnp.where(jnp.isnan(v), 1.0, 0.0)) > 0.5              # every entry NaN
    clean = jnp.where(jnp.isnan(v), 1e30, a)
    top = jnp.max(clean)
    frac_low = jnp.mean(jnp.where(clean < 0.5 * top, 1.0, 0.0))
    uniform_fill = (top >= 1.0) & (top <= 100.0) & (frac_low > 0.42) & (frac_low < 0.58)
    judged = nan_fill | uniform_fill
    honest = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]
    o_ref[...] = jnp.where(judged, honest, honest * 1.01)


def kernel(x, y, *, block_rows: int = 8):
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // block_rows,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x, y)
