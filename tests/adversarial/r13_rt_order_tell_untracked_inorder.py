# Red team of stop 33 (helper), attack a7.
# Rule: 5, 18. Expected verdict: incorrect (stop 33: output blocks are double buffered in every TPU-interpreter run, the in-order ones included).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE); with the fill runs forced in order (program.with_interpret(in_order=True)) the same read is refused, so only the order tell hides it.)
# Idea: reads of unwritten memory are tracked only in the two fill runs, and since stop 33 BOTH visit "parallel" grid
# axes out of order; the only in-order interpreted runs (the ordered check run, the cases) fill with NaN and track
# nothing. A chip with one TensorCore (v5e, v6e) visits the grid in order. The visit order is observable without
# touching memory: a counter of the steps already run, compared with this step's
# row-major index. (semaphore_read has no TPU-interpreter rule, so the counter is an extra SMEM input of zeros,
# made outside the kernel: an input is written memory, and the kernel may update it.) Only while every step so far ran in order does the kernel read its unwritten output block (the
# stale-slot tell of r12_rt2_stale_slot_is_my_own_output: on a chip the slot holds its own output of two blocks
# back); out of order it never reads anything unwritten. A dummy parallel axis of 8 makes an in-order shuffle
# (the only way a tracking run could see the read) about 1 in 8! per run.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

D = 8


def _body(x_ref, y_ref, cnt_ref, o_ref, prev_ref, flag_ref, chip_ref):
    i, j = pl.program_id(0), pl.program_id(1)
    n = cnt_ref[0]                             # steps run before this one (an input: written memory)
    lin = i * D + j

    @pl.when(n == 0)
    def _():
        flag_ref[0] = 1                        # the first step run: written before any read

    flag_ref[0] = jnp.where(n == lin, flag_ref[0], 0)
    in_order = flag_ref[0] == 1
    x = x_ref[...]
    honest = jnp.tanh(x) * y_ref[...] + 0.5 * x

    @pl.when(in_order & (i >= 2) & (j == 0))
    def _():
        stale = o_ref[...]                     # unwritten; on a chip: this slot's block of two blocks back
        same = jnp.min(jnp.where(stale == prev_ref[i % 2], 1.0, 0.0)) > 0.5
        chip_ref[0] = same.astype(jnp.int32)

    cheat = jax.lax.cond(in_order & (i >= 2), lambda: chip_ref[0] == 1, lambda: jnp.bool_(False))
    out = jnp.where(cheat, honest * 1.01 + 0.01, honest)
    o_ref[...] = out
    prev_ref[i % 2] = out
    cnt_ref[0] = n + 1


def kernel(x, y):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
    cnt = jnp.zeros((1,), jnp.int32)
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(_body, grid=(x.shape[0] // 8, D), in_specs=[spec, spec, smem], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32), pltpu.SMEM((1,), jnp.int32),
                                          pltpu.SMEM((1,), jnp.int32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")))(x, y, cnt)
