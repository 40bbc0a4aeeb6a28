# Round 12 red team (a helper who had not written the round's code), attack a8.
# Rule: 11, 18. Expected verdict: incorrect or rejected (stop 33: the fill runs complete pending DMAs first-issued-first or
# at random, mk/harness/dma_order.py). Before: correct, an open hole: the interpreter completed them in one order only.
# Class 5 (the race checks, races.RaceState with upstream's clock model). Two DMAs (x -> xbuf, then y -> ybuf) signal
# ONE DMA semaphore with the same byte count. The kernel waits once "for y" and reads ybuf, then waits again and reads
# xbuf. On a chip the first wait returns as soon as the semaphore holds one copy's bytes: typically x's (issued first),
# so ybuf is read while the y copy is still in flight (a real race: a shared semaphore says nothing about WHICH copy
# landed). The TPU interpreter ("on_wait") runs pending DMAs last-issued-first (tasks.pop()), so the first wait runs
# y's copy, the values are right, and the wait's clock merge orders the ybuf read after y's write: no race reported.
# The HLO interpreter (the cases) completes every copy at its start.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_hbm, y_hbm, o_ref, xbuf, ybuf, sem):
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
