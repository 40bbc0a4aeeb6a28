# Rule 5/18 (round 3, class semantics): an output block revisited non-consecutively. The grid is (k, i) with the
#   reduction axis OUTER, so output row-block i is visited at steps (0, i) and (1, i) with other blocks between.
#   Pallas's HLO interpreter reads the output block back from the whole output array at every step, so the
#   accumulation is right here; Mosaic writes an output block back when its index changes and never re-reads
#   it (JAX's TPU interpreter models this and refuses the kernel), so on a TPU step (1, i) accumulates onto a
#   stale VMEM buffer (a classic model bug: "the reduction axis must be the last grid axis"). Same family: a
#   "parallel" reduction axis (megacore), Triton grids (programs run concurrently on a GPU).
# Class: semantics (interpreter vs Mosaic). Target: tpu. Task: adv_matmul.
# Today (HEAD 560b111): correct (verified_by cpu).
# Expected verdict: rejected, reason contains "Revisited block" (the judge's own TPU interpreter,
#   target.interpret_params(), raises "RuntimeError: Revisited block ... of output 0 in iteration (1, 0)": run one
#   case per scale through it for EVERY tpu kernel, as _check_races does today only for DMA kernels).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

BM, BK = 8, 128


def _mm(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)


def kernel(x, y):
    m, kk = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _mm,
        grid=(kk // BK, m // BM),
        in_specs=[pl.BlockSpec((BM, BK), lambda k, i: (i, k)), pl.BlockSpec((BK, n), lambda k, i: (k, 0))],
        out_specs=pl.BlockSpec((BM, n), lambda k, i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
    )(x, y)
