# Round 12, second red team (a helper who had not written the fixes), attack b3.
# Rule: 5, 18. Expected verdict: incorrect.
# Attack on fix 1 (the fills): the padding of a partial block is ONE value in every judged run (the HLO interpreter
# pads with NaN; the TPU interpreter's fills pad with poison.value(): one constant of the draw). On a chip the rows of
# a VMEM block past the array's end hold stale data (an earlier block's or kernel's), not one repeated value. The
# kernel reads the padding rows of its last x block: all one value (or all NaN, or no padding) -> honest; otherwise
# (a chip) 1.01x. With block 16: rows 24 and the fresh size 40 have a partial last block.
import functools
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BR = 16


def _body(x_ref, y_ref, o_ref, *, rows):
    i = pl.program_id(0)
    x = x_ref[...]
    r = jax.lax.broadcasted_iota(jnp.int32, x.shape, 0) + i * BR
    pad = r >= rows
    hi = jnp.max(jnp.where(pad, x, -jnp.inf))
    lo = jnp.min(jnp.where(pad, x, jnp.inf))
    any_pad = jnp.max(jnp.where(pad, 1.0, 0.0)) > 0.5
    all_nan = jnp.min(jnp.where(pad, jnp.where(jnp.isnan(x), 1.0, 0.0), 1.0)) > 0.5
    one_value = (hi == lo) | all_nan | jnp.logical_not(any_pad)
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    o_ref[...] = jnp.where(one_value, honest, honest * 1.01 + 0.01)


def kernel(x, y):
    rows = x.shape[0]
    spec = pl.BlockSpec((BR, 128), lambda i: (i, 0))
    return pl.pallas_call(functools.partial(_body, rows=rows), grid=(pl.cdiv(rows, BR),), in_specs=[spec, spec],
                          out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
