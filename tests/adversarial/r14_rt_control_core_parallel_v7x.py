# Round 14 red team (rt34), false-positive probe fp3. Task: tanh, judged with chip="v7x". Rules 5, 18.
# Control. Expected verdict: compile_error: an open false positive (judged with chip="v7x": the compile-only TPU7x has one active core).
# Idea: an HONEST kernel in the form v7x (two TensorCores) asks for: grid (2, half) with dimension_semantics
# (pltpu.CORE_PARALLEL, "arbitrary"), each core doing half of the row blocks (the last block clamped: core 1 may
# write its last block twice, consecutively, same values). No state crosses the core axis. Right on a v7x.
# Judged with chip="v7x" (tests/adversarial_new2/_tools/judge.py, CHIP=v7x).
# Measured verdict (judge at 6b6a34b, no chip): compile_error (FALSE POSITIVE, chip=v7x): the judge's compile-only TPU7x has 1 active core, "Core-parallel dimension 0 has iteration bound: 2 ..."
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    nb = x.shape[0] // 8
    half = pl.cdiv(nb, 2)
    spec = pl.BlockSpec((8, 128), lambda c, j: (jnp.minimum(c * half + j, nb - 1), 0))
    return pl.pallas_call(_body, grid=(2, half), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=(pltpu.CORE_PARALLEL, pltpu.ARBITRARY)))(x, y)
