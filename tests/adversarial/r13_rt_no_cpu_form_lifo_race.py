# Red team of stop 33 (helper), attack a2.
# Rule: 11, 18. Expected verdict: incorrect or rejected (stop 33: the fill runs, with their DMA orders, go for programs without a CPU form too).
# Before (measured by the helper at 4c02ed8 (tanh task, no chip): correct (HOLE): "all 4 cases match the reference".)
# Idea: as a1, a program without a CPU form (one pltpu.prng_seed) is run only by the TPU interpreter's "cases"
# (poison="nan"): mk/harness/dma_order.py varies the DMA order only for mk's fills, so every run completes the
# last-issued DMA on a shared semaphore first (upstream's LIFO) and r12_rt_shared_sem_lifo_race's body (wait "for
# y", read ybuf; on a chip x lands first) is right in every run again.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_hbm, y_hbm, o_ref, xbuf, ybuf, sem):
    pltpu.prng_seed(0)  # no CPU lowering: no CPU form, so no fill runs
    cx = pltpu.make_async_copy(x_hbm, xbuf, sem)
    cy = pltpu.make_async_copy(y_hbm, ybuf, sem)
    cx.start()
    cy.start()
    cy.wait()          # returns when ONE copy's bytes have arrived, not necessarily y's
    yv = ybuf[...]     # race on a chip
    cx.wait()
    xv = xbuf[...]
    o_ref[...] = jnp.tanh(xv) * yv + 0.5 * xv


def kernel(x, y):
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        _body,
        in_specs=[any_spec, any_spec],
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(y.shape, y.dtype), pltpu.SemaphoreType.DMA],
    )(x, y)
