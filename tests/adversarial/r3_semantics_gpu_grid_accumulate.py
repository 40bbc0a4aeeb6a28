# Rule 5/18 (round 3, class semantics): a Triton kernel that accumulates its output across grid steps. Pallas's
#   HLO interpreter runs the grid as a sequential loop, so `o_ref[...] += x_blk @ y_blk` over the 8 k-steps (with
#   the zero-init at k == 0) sums correctly here. On a GPU every grid point is a separate Triton program and they
#   run concurrently, in no order: the read-modify-write of the one output block races (and the zero-init can
#   land after other programs' adds). The judge has no device and passes it.
# Class: semantics (interpreter vs Triton). Target: gpu. Task: adv_matmul.
# Today (HEAD 65aed04): correct (verified_by cpu). (At 560b111 every Triton kernel was a compile_error: jax.export
#   refused the __gpu$xla.gpu.triton custom call.)
# Expected verdict: rejected, reason contains "concurrently" (gpu: reject an output block that two grid points
#   write, from the grid mapping's index maps; or run the interpreted grid twice, forward and reversed, and require
#   the same result).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

BK = 32


def _mm(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    # accumulates across grid steps: sequential in the interpreter, concurrent programs on a GPU
    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)


def kernel(x, y):
    m, kk = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _mm,
        grid=(kk // BK,),
        in_specs=[pl.BlockSpec((m, BK), lambda k: (0, k)), pl.BlockSpec((BK, n), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((m, n), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=plgpu.CompilerParams(),
    )(x, y)
