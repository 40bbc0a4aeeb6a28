"""The Triton race rule evaluates each output index map over the grid (mk.harness.program.shared_output_blocks)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from mk.harness import program

BM, BN, BK = 16, 128, 32


def _matmul(out_map, grid_k: bool = True):
    def body(x_ref, y_ref, o_ref):
        o_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)

    def kernel(x, y):
        m, kk = x.shape
        n = y.shape[1]
        return pl.pallas_call(
            body, grid=(m // BM, n // BN, kk // BK),
            in_specs=[pl.BlockSpec((BM, BK), lambda i, j, k: (i, k)), pl.BlockSpec((BK, BN), lambda i, j, k: (k, j))],
            out_specs=pl.BlockSpec((BM, BN), out_map), out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
            compiler_params=plgpu.CompilerParams())(x, y)
    return kernel


def _found(kernel, m=64, k=256, n=256):
    return program.shared_output_blocks(jax.make_jaxpr(kernel)(jnp.ones((m, k)), jnp.ones((k, n))).jaxpr)


@pytest.mark.parametrize("out_map", [lambda i, j, k: (i, j), lambda i, j, k: (i + 0 * k, j),
                                     lambda i, j, k: (i, j + k // 2), lambda i, j, k: (i, (j + k) % 2)],
                         ids=["ignores-k", "zero-times-k", "k-halved", "wraps"])
def test_two_grid_points_writing_one_block_are_found(out_map):
    found = _found(_matmul(out_map))
    assert len(found) == 1 and "both write block" in found[0], found


def test_a_map_that_gives_every_grid_point_its_own_block_is_not_flagged():
    def kernel(x, y):
        m, kk = x.shape
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2.0), grid=(m // BM, kk // BN),
            in_specs=[pl.BlockSpec((BM, BN), lambda i, j: (i, j))], out_specs=pl.BlockSpec((BM, BN), lambda i, j: (i, j)),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), compiler_params=plgpu.CompilerParams())(x)
    assert _found(kernel, m=64, k=256) == []


def test_a_large_grid_is_sampled_and_still_caught():
    # 2048 x 8 x 8 = 131,072 grid points, past the 16,384 evaluated whole: corners, neighbours and random points
    assert _found(_matmul(lambda i, j, k: (i + 0 * k, j)), m=2048 * BM, k=8 * BK, n=8 * BN)


def test_atomic_updates_are_not_a_race():
    def body(x_ref, y_ref, z_ref, o_ref):
        part = jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)
        rows, cols = pl.ds(pl.program_id(0) * BM, BM), pl.ds(pl.program_id(1) * BN, BN)
        plgpu.atomic_add(o_ref, (rows, cols), part)

    def kernel(x, y):
        m, kk = x.shape
        n = y.shape[1]
        return pl.pallas_call(
            body, grid=(m // BM, n // BN, kk // BK),
            in_specs=[pl.BlockSpec((BM, BK), lambda i, j, k: (i, k)), pl.BlockSpec((BK, BN), lambda i, j, k: (k, j)),
                      pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
            input_output_aliases={2: 0}, compiler_params=plgpu.CompilerParams())(x, y, jnp.zeros((m, n), x.dtype))
    assert _found(kernel) == []
