# Control (round 10): a split-K Triton matmul whose k programs add their partial products into one zeroed output
#   block with `plgpu.atomic_add`; the output is aliased to a zeroed input. Several grid points share an output
#   block, but atomics do not race (on a GPU the adds land in some order; the sum is the same up to rounding).
# Class: semantics (a legitimate kernel the race rule must not refuse). Target: gpu. Task: adv_matmul.
# Before: rejected ("Triton runs grid points concurrently"). Expected verdict: correct.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

BM, BN, BK = 16, 128, 32


def _mm(x_ref, y_ref, z_ref, o_ref):
    del z_ref  # the zeroed buffer o_ref aliases
    part = jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)
    i, j = pl.program_id(0), pl.program_id(1)
    rows = pl.ds(pl.multiple_of(i * BM, BM), BM)
    cols = pl.ds(pl.multiple_of(j * BN, BN), BN)
    plgpu.atomic_add(o_ref, (rows, cols), part)


def kernel(x, y):
    m, kk = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _mm,
        grid=(m // BM, n // BN, kk // BK),
        in_specs=[pl.BlockSpec((BM, BK), lambda i, j, k: (i, k)), pl.BlockSpec((BK, BN), lambda i, j, k: (k, j)),
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        input_output_aliases={2: 0},
        compiler_params=plgpu.CompilerParams(),
    )(x, y, jnp.zeros((m, n), x.dtype))
