"""The TPU-interpreter check visits "parallel" grid axes out of order (issue 22, item 2): which axes a kernel declares
parallel (mk.harness.program.parallel_axes) and the seed that moves each one's first and last index
(shuffling_seed), checked against the order the interpreter itself records."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mk.harness import program
from mk.targets import get_target


def _add(semantics, grid=(2, 3, 2)):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def fn(x):
        return pl.pallas_call(body, out_shape=x, grid=grid,
                              in_specs=[pl.BlockSpec((8, 128), lambda i, j, k: (i, j))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
                              compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)
    return fn


X = jax.ShapeDtypeStruct((16, 384), jnp.float32)


def test_the_parallel_axes_are_the_leading_ones_declared_parallel():
    assert program.parallel_axes(jax.make_jaxpr(_add(("parallel", "parallel", "parallel")))(X).jaxpr) == [(2, 3, 2)]
    assert program.parallel_axes(jax.make_jaxpr(_add(("parallel", "arbitrary", "arbitrary")))(X).jaxpr) == [(2,)]
    assert program.parallel_axes(jax.make_jaxpr(_add(("arbitrary",) * 3))(X).jaxpr) == [()]


def test_a_kernel_without_parallel_axes_needs_no_search():
    assert program.shuffling_seed([(), (1,)]) == (1, 0)


def test_the_seed_moves_every_axis_as_the_interpreter_visits_it():
    fn = _add(("parallel", "parallel", "parallel"))
    seed, moved = program.shuffling_seed(program.parallel_axes(jax.make_jaxpr(fn)(X).jaxpr))
    assert moved == 3
    visited = []

    def record(token, point, core):
        visited.append(tuple(int(c) for c in np.asarray(point)))
        return token

    params = dataclasses.replace(get_target("tpu").interpret_params(seed=seed), grid_point_recorder=record)
    x = jnp.arange(16 * 384, dtype=jnp.float32).reshape(16, 384)
    with pltpu.force_tpu_interpret_mode(params):
        out = jax.block_until_ready(fn(x))
    np.testing.assert_array_equal(out, x + 1.0)  # order does not change a kernel that carries nothing
    assert sorted(visited) == sorted({(i, j, k) for i in range(2) for j in range(3) for k in range(2)})
    first, last = visited[0], visited[-1]
    # each axis starts away from index 0 and ends away from its last index
    assert all(f != 0 for f in first) and all(l != n - 1 for l, n in zip(last, (2, 3, 2))), visited
