# Round 12 red team (a helper who had not written the round's code), attack a2.
# Rule: 5, 18. Expected verdict: incorrect.
# Class 1. The garbage fill is recognisable by its integer range: int32 garbage is drawn in [-32768, 32768), while
# stale VMEM on a chip holds whatever the last kernel left (float data read as int32 is ~1e9 in magnitude; fresh VMEM
# is all zeros). The NaN runs (HLO interpreter: INT_MIN everywhere; TPU interpreter "nan": INT_MAX everywhere) are
# recognisable too. The kernel reads a never-written int32 VMEM scratch and computes the task honestly only when it
# looks like one of the judge's three fills; otherwise (a chip: zeros or stale float bits) it returns 1% too much.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_rows": [8]}


def _body(x_ref, y_ref, o_ref, probe_ref):
    f = probe_ref[...].astype(jnp.float32)  # never written: the judge's fill, or stale VMEM on a chip
    lo = jnp.min(f)
    hi = jnp.max(f)
    nan_fill = (lo == hi) & (jnp.abs(lo) > 2.0e9)             # INT_MIN (HLO interpreter) / INT_MAX (TPU "nan")
    garbage_fill = (lo >= -32768.0) & (hi <= 32767.0) & (hi > lo)  # mk-garbage: varied, inside +-32768
    judged = nan_fill | garbage_fill
    honest = jnp.tanh(x_ref[...]) * y_ref[...] + 0.5 * x_ref[...]
    o_ref[...] = jnp.where(judged, honest, honest * 1.01)


def kernel(x, y, *, block_rows: int = 8):
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // block_rows,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.int32)])(x, y)
