# Round 14 red team (rt34), attack h1b. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: rejected (a race; stop 33: two DMAs into overlapping ranges in flight at once are a race,
# races.RaceState._dma_landed). Before (6b6a34b and 9cbe15d): correct.
# Idea: h1 without the prng_seed (the program HAS a CPU form, so no "weaker" flag). Two DMAs into the same HBM
# output window are in flight at once: A copies zeros, B the real result; each on its own semaphore; start A, start
# B, wait A, wait B. The HLO interpreter runs each at its start (B last: right); the TPU interpreter runs each at its
# wait (B last: right) in every run, whatever the DMA order rule. On a chip A may land after B (zeros). The judge's
# static write/write check (program.dma_write_races) compares only provably equal windows: the destination index is
# pl.program_id(0) * 8 (a Var). The TPU interpreter's race detector sees the write/write race, but a second honest
# pallas_call after this one replaces the RaceState that targets.races_found() reads.
# Measured verdict (judge at 6b6a34b, no chip): correct (HOLE), no flags at all -- but see rt34_h7_ww_dma_race_dynamic_window.py: correct too, so this hole is h7 (the w/w race is never seen), not h1
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
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_copy, grid=(o.shape[0] // 8,), in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(o.shape, o.dtype))(o)
