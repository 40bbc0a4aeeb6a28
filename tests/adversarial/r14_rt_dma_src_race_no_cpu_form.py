# Round 14 red team (rt34), control h1c: h1 with its prng_seed but WITHOUT the second pallas_call. Task: tanh. Rules 5, 18.
# Rule: 5, 18. Expected verdict: rejected (a race), as before: h1 with its prng_seed, without its second kernel.
# Idea: the DMA out of `buf` is started, THEN the kernel writes the real result into `buf`, then waits. The TPU
# interpreter (dma_execution_mode="on_wait") reads the source only at the wait, so it copies the real result; on a
# chip the copy engine reads `buf` as soon as it is issued (zeros, or a torn mix). One pallas_call: the race detector
# alone is rejected (control). Here a second, honest pallas_call runs after it: targets.races_found() reads only the
# LAST kernel's RaceState (the interpreter builds a new one per pallas_call), so the race is forgotten. One
# pltpu.prng_seed: no CPU form, so the cases too run in the TPU interpreter (the HLO interpreter runs a DMA at its
# start, as a chip does, and would see zeros).
# Measured verdict (judge at 6b6a34b, no chip): rejected (TPU-interpreter check at ci: race detector) -- h1 minus the second call
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_hbm, y_hbm, o_hbm, xs, ys, buf, sems):
    pltpu.prng_seed(0)  # no CPU lowering: every case runs in the TPU interpreter (DMAs execute at the wait there)
    cx = pltpu.make_async_copy(x_hbm, xs, sems.at[0]); cx.start(); cx.wait()
    cy = pltpu.make_async_copy(y_hbm, ys, sems.at[1]); cy.start(); cy.wait()
    buf[...] = jnp.zeros_like(buf)
    co = pltpu.make_async_copy(buf, o_hbm, sems.at[2])
    co.start()
    x = xs[...]
    buf[...] = jnp.tanh(x) * ys[...] + 0.5 * x   # written after the copy out was issued
    co.wait()


def racy(x, y):
    any_ = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(_body, in_specs=[any_, any_], out_specs=any_,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(x.shape, x.dtype),
                                          pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA((3,))])(x, y)


def kernel(x, y):
    return racy(x, y)


def _copy(i_ref, o_ref):
    o_ref[...] = i_ref[...]
