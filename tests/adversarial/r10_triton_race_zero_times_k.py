# Rule 5/18 (round 10, class semantics): the round-3 Triton K-accumulation race, its output index map written
#   `(i + 0 * k, j)` so that it names k: the rule read which grid axes the map's jaxpr uses, and k is used.
#   Every k step still writes the same output block, concurrently on a GPU.
# Class: semantics (interpreter vs Triton). Target: gpu. Task: adv_matmul.
# Before: correct. Expected verdict: rejected, reason contains "Triton runs grid points concurrently" (the output
#   index map is evaluated over the grid: grid points (0, 0, 0) and (0, 0, 1) both write block (0, 0)).
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
        out_specs=pl.BlockSpec((BM, BN), lambda i, j, k: (i + 0 * k, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=plgpu.CompilerParams(),
    )(x, y)
