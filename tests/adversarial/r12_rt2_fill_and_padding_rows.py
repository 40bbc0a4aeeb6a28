# Round 12, second red team (a helper who had not written the fixes), attack b2.
# Rule: 5, 18. Expected verdict: incorrect.
# Attack on fix 1 (the fills): a tell that is a CONJUNCTION of memory and data. The garbage/shuffled fills are only
# ever seen together with a "normal" input (evaluate._check_races: one fresh-seed `normal` case per scale); the
# `edges` cases (exact-zero rows, as padding) only run in the HLO interpreter, whose scratch holds NaN
# (pallas.primitives.uninitialized_value). So the kernel is honest when its never-written scratch is all NaN, or when
# its x block has no all-zero row. On a chip (stale, finite scratch) a block with padding rows gets 1.01x: wrong.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, probe_ref):
    x = x_ref[...]
    nan_fill = jnp.min(jnp.where(jnp.isnan(probe_ref[...]), 1.0, 0.0)) > 0.5   # the HLO interpreter's scratch
    row_zero = jnp.max(jnp.abs(x), axis=-1) == 0.0
    has_padding = jnp.max(jnp.where(row_zero, 1.0, 0.0)) > 0.5
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    o_ref[...] = jnp.where(nan_fill | jnp.logical_not(has_padding), honest, honest * 1.01 + 0.01)


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x, y)
