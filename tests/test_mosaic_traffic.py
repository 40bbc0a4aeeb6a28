"""The HBM traffic of a Mosaic kernel's blocks, read from the exported TPU program (mk/harness/mosaic_traffic.py).

Each expectation is arithmetic on the kernel's grid and index maps, written down before the code ran."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mk.harness import mosaic_traffic
from mk.targets import get_target

pytestmark = pytest.mark.unit


def _kernels(fn, *structs):
    """The Mosaic bodies of ``fn``'s TPU program, as the judge's tracer exports it (lowering only, no libtpu)."""
    tgt = get_target("tpu")
    checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(tgt.kernel_calls)]
    with tgt.lowering_context("v6e"):
        text = export.export(jax.jit(fn), platforms=[tgt.platform], disabled_checks=checks)(*structs).mlir_module()
    return [mosaic_traffic.traffic(mosaic_traffic.body_of(line)) for line in text.splitlines() if "tpu_custom_call" in line]


def _matmul(bm, bn, bk):
    def body(x_ref, y_ref, o_ref, acc):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)

        acc[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc[...].astype(o_ref.dtype)

    def fn(x, y):
        m, k = x.shape
        n = y.shape[1]
        return pl.pallas_call(body, grid=(m // bm, n // bn, k // bk),
                              in_specs=[pl.BlockSpec((bm, bk), lambda i, j, l: (i, l)),
                                        pl.BlockSpec((bk, bn), lambda i, j, l: (l, j))],
                              out_specs=pl.BlockSpec((bm, bn), lambda i, j, l: (i, j)),
                              out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
                              scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)])(x, y)
    return fn


X = jax.ShapeDtypeStruct((1024, 2048), jnp.bfloat16)
Y = jax.ShapeDtypeStruct((2048, 1024), jnp.bfloat16)


def test_a_matmul_fetches_its_row_block_once_per_column_block():
    (t,) = _kernels(_matmul(128, 256, 512), X, Y)
    assert t.grid == (8, 4, 4) and not t.unknown
    mib = 1 << 20
    # x: 4 MiB, read once per column block (n / bn = 4); y: 4 MiB, once per row block (m / bm = 8); out once
    assert [w.moved_bytes for w in t.windows] == [16 * mib, 32 * mib, 2 * mib]
    assert t.moved_bytes == 50 * mib
    (big,) = _kernels(_matmul(512, 512, 512), X, Y)  # larger blocks: x twice, y twice, out once
    assert big.moved_bytes == (8 + 8 + 2) * mib


def _rows(index_map, grid=8):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def fn(x):
        return pl.pallas_call(body, grid=(grid,), in_specs=[pl.BlockSpec((8, 128), index_map)],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((8 * grid, 128), jnp.float32))(x)
    return fn


BLOCK = 8 * 128 * 4
X64 = jax.ShapeDtypeStruct((64, 128), jnp.float32)


def test_index_arithmetic_is_evaluated_over_the_grid():
    (same,) = _kernels(_rows(lambda i: (i, 0)), X64)
    assert same.windows[0] == mosaic_traffic.Window(8 * BLOCK) and same.moved_bytes == 16 * BLOCK
    (halves,) = _kernels(_rows(lambda i: (i // 2, 0)), X64)  # 0 0 1 1 2 2 3 3: each fetched once
    assert halves.windows[0] == mosaic_traffic.Window(4 * BLOCK)
    (alternate,) = _kernels(_rows(lambda i: (i % 2, 0)), X64)  # 0 1 0 1 ...: a fetch every step
    assert alternate.windows[0] == mosaic_traffic.Window(8 * BLOCK)
    (clamped,) = _kernels(_rows(lambda i: (jnp.minimum(i, 5) * 1 + 0, 0)), X64)
    assert clamped.windows[0] == mosaic_traffic.Window(6 * BLOCK)


def test_32_bit_wrap_around_and_unsigned_operations_as_the_chip_computes_them():
    # an attacker's index map: i * 2**30 is negative in int32 for i = 2, 3, 6, 7: blocks 0 0 1 1 0 0 1 1 (4 fetches),
    # where unbounded integers read 0 every step (1 fetch)
    wrap = lambda i: ((i * jnp.int32(2**30) < 0).astype(jnp.int32), 0)  # noqa: E731
    (t,) = _kernels(_rows(wrap), X64)
    assert t.windows[0] == mosaic_traffic.Window(4 * BLOCK)
    # (i - 4) as uint32 // 2**31 is 1 for i < 4 and 0 after (2 fetches); signed division gives 0 throughout (1)
    unsigned = lambda i: ((jax.lax.convert_element_type(i - 4, jnp.uint32) // jnp.uint32(2**31)).astype(jnp.int32), 0)  # noqa: E731
    (u,) = _kernels(_rows(unsigned), X64)
    assert u.windows[0] == mosaic_traffic.Window(2 * BLOCK)


def test_an_index_it_cannot_evaluate_counts_a_block_every_step_and_what_it_cannot_bound_is_named():
    def body(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def gathered(idx, x):  # the block index comes from a scalar-prefetch array: a block every step, the upper bound
        spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(8,),
                                            in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
                                            out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)))
        return pl.pallas_call(body, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32))(idx, x)

    (t,) = _kernels(gathered, jax.ShapeDtypeStruct((8,), jnp.int32), X64)
    assert t.windows[0] == mosaic_traffic.Window(8 * BLOCK, upper_bound=True) and not t.unknown

    def copy(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf, sem).start()
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf, sem).wait()
        o_ref[...] = buf[...]

    def own_dma(x):  # pl.ANY: the kernel's own DMAs, no window: named, not guessed
        return pl.pallas_call(copy, grid=(8,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA])(x)

    (t,) = _kernels(own_dma, X64)
    assert t.windows == (mosaic_traffic.Window(8 * 4096),) and "pl.ANY" in t.unknown[0]

    def looped(n_ref, x_ref, o_ref):  # a loop whose trip count is a scalar-prefetch value
        o_ref[...] = jax.lax.fori_loop(0, n_ref[0], lambda i, y: y * 2.0, x_ref[...])

    def run_time_loop(n, x):
        spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(8,),
                                            in_specs=[pl.BlockSpec((8, 128), lambda i, n: (i, 0))],
                                            out_specs=pl.BlockSpec((8, 128), lambda i, n: (i, 0)))
        return pl.pallas_call(looped, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32))(n, x)

    (t,) = _kernels(run_time_loop, jax.ShapeDtypeStruct((1,), jnp.int32), X64)
    assert any("known only at run time" in why for why in t.unknown), t.unknown

    def run_time_grid(x):
        g = (x[0, 0] * 0).astype(jnp.int32) + 8
        return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]), grid=(g,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32))(x)

    (t,) = _kernels(run_time_grid, X64)
    assert t.unknown == ("its grid is sized at run time",)


def test_what_is_not_a_mosaic_module_gives_nothing():
    assert mosaic_traffic.body_of('backend_config="{}"') is None
    assert mosaic_traffic.traffic(b"not bytecode").unknown
