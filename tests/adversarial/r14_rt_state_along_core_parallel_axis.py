# Round 14 red team (rt34), attack h6. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: compile_error (the compile-only chips have one active core), so it holds for now.
# Idea: state carried along a grid axis declared pltpu.CORE_PARALLEL ("core_parallel"). On a chip with two
# TensorCores (v5p, v7x) such an axis is split between the cores, each with its own VMEM: core 1 never runs step 0,
# so a scratch initialised only at step 0 is garbage there. The judge shuffles only axes declared "parallel"
# (program.parallel_axes and the interpreter's _get_parallel_dim_semantics test `ds in ("parallel", PARALLEL)`), so a
# core_parallel axis is visited in order, one core, in every run: the scratch is always initialised first.
# Measured verdict (judge at 6b6a34b, no chip): compile_error (holds) on v6e and on v7x: "Core-parallel dimension 0 has iteration bound: 2, which is greater than the number of active cores: 1"
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_ref, coef_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        coef_ref[...] = jnp.full(coef_ref.shape, 0.5, jnp.float32)

    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + coef_ref[...] * x


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=(pltpu.CORE_PARALLEL,)))(x, y)
