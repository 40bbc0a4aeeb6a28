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

BM, BN, BK = 16, 128, 32  # power-of-two blocks (Triton's rule), so every suite size, held-out and fresh ones too, lowers


def _mm(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    # accumulates across grid steps: sequential in the interpreter, concurrent programs on a GPU
    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)


def kernel(x, y):
    m, kk = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _mm,
        grid=(m // BM, n // BN, kk // BK),
        in_specs=[pl.BlockSpec((BM, BK), lambda i, j, k: (i, k)), pl.BlockSpec((BK, BN), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((BM, BN), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=plgpu.CompilerParams(),
    )(x, y)
