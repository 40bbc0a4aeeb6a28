# Round 14 red team (rt34), attack h7 (found as the control for h1b: the same racy kernel, alone). Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: rejected (a race; stop 33: two DMAs into overlapping ranges in flight at once are a race,
# races.RaceState._dma_landed). Before (6b6a34b and 9cbe15d): correct.
# Idea (one pallas_call, with a CPU form, no flag): two DMAs into the same HBM
# output window are in flight at once: A copies zeros, B the real result; each on its own semaphore; start A, start
# B, wait A, wait B. The HLO interpreter runs each at its start (B last: right); the TPU interpreter runs each at its
# wait (B last: right) in every run, whatever the DMA order rule. On a chip A may land after B (zeros). The judge's
# static write/write check (program.dma_write_races) compares only provably equal windows: the destination index is
# pl.program_id(0) * 8 (a Var). The TPU interpreter's race detector does not report it either (measured).
# Measured verdict (judge at 6b6a34b, no chip): correct (HOLE h7), no flags: a write/write DMA race into one HBM window through a dynamic index is seen by neither the static check nor the race detector
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_ref, y_ref, o_hbm, zbuf, rbuf, sems):
    zbuf[...] = jnp.zeros_like(zbuf)
    x = x_ref[...]
    rbuf[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x
    start = pl.program_id(0) * 8
    win = o_hbm.at[pl.ds(start, x.shape[0])]
    a = pltpu.make_async_copy(zbuf, win, sems.at[0])
    b = pltpu.make_async_copy(rbuf, win, sems.at[1])
    a.start()
    b.start()
    a.wait()
    b.wait()


def _copy(i_ref, o_ref):
    o_ref[...] = i_ref[...]


def kernel(x, y):
    full = pl.BlockSpec(x.shape, lambda i: (0, 0))
    o = pl.pallas_call(_body, grid=(1,), in_specs=[full, full], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                       scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(x.shape, x.dtype),
                                       pltpu.SemaphoreType.DMA((2,))])(x, y)
    return o
