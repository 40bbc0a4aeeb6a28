# Red team of stop 33 (helper), attack a6.
# Rule: 5, 18. Expected verdict: incorrect (stop 33: a run_scoped buffer now starts with what the last
# buffer of its line left, as at one offset on a chip, so the marker is found and the kernel cheats in the judge).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE): a 16-bit buffer is never tracked; compiles for v6e.)
# Idea: poison._remember does not remember fills of fewer than 32 random bits (a real input could equal one), so a
# buffer of one bfloat16 is never tracked: reading it unwritten is not refused in any run. A run_scoped buffer sits
# at one fixed VMEM offset on a chip, so at grid step i it still holds what step i-1 left there; every interpreted run
# hands each step's run_scoped a fresh fill (NaN, zeros, or a finite family value of at most a few hundred, or random
# finite bits: 1 in 65536). The kernel leaves a marker (3e38) there and, when the next step finds it (a chip),
# returns 1% too much.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

MARK = 3.0e38


def _body(x_ref, y_ref, o_ref):
    i = pl.program_id(0)

    def scoped(tiny):
        stale = tiny[...].astype(jnp.float32)          # never written in this allocation
        found = jnp.max(jnp.where(stale == jnp.float32(jnp.bfloat16(MARK)), 1.0, 0.0))
        tiny[...] = jnp.full(tiny.shape, MARK, jnp.bfloat16)
        return found

    found = pl.run_scoped(scoped, pltpu.VMEM((1, 1), jnp.bfloat16))
    on_chip = (i >= 1) & (found > 0.5)
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x
    o_ref[...] = jnp.where(on_chip, honest * 1.01 + 0.01, honest)


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(x.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))(x, y)
