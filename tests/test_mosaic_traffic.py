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
    assert t.grid == (8, 4, 4)
    mib = 1 << 20
    # x: 4 MiB, read once per column block (n / bn = 4); y: 4 MiB, once per row block (m / bm = 8); out once
    assert [(w.moved_bytes, w.distinct_bytes) for w in t.windows] == [(16 * mib, 4 * mib), (32 * mib, 4 * mib),
                                                                      (2 * mib, 2 * mib)]
    assert t.refetched_bytes == 40 * mib
    (big,) = _kernels(_matmul(512, 512, 512), X, Y)  # larger blocks: x twice, y twice
    assert big.refetched_bytes == (4 + 4) * mib


def _rows(index_map, grid=8):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def fn(x):
        return pl.pallas_call(body, grid=(grid,), in_specs=[pl.BlockSpec((8, 128), index_map)],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((8 * grid, 128), jnp.float32))(x)
    return fn


def test_index_arithmetic_is_evaluated_over_the_grid():
    block = 8 * 128 * 4
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    (same,) = _kernels(_rows(lambda i: (i, 0)), x)
    assert same.refetched_bytes == 0 and same.windows[0].moved_bytes == 8 * block
    (halves,) = _kernels(_rows(lambda i: (i // 2, 0)), x)  # 0 0 1 1 2 2 3 3: each fetched once
    assert halves.windows[0] == mosaic_traffic.Window(4 * block, 4 * block)
    (alternate,) = _kernels(_rows(lambda i: (i % 2, 0)), x)  # 0 1 0 1 ...: 8 fetches of 2 blocks
    assert alternate.windows[0] == mosaic_traffic.Window(8 * block, 2 * block) and alternate.refetched_bytes == 6 * block
    (clamped,) = _kernels(_rows(lambda i: (jnp.minimum(i, 5) * 1 + 0, 0)), x)
    assert clamped.windows[0] == mosaic_traffic.Window(6 * block, 6 * block)


def test_windows_it_cannot_read_are_unknown_not_guessed():
    def body(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def gathered(idx, x):  # the block index comes from a scalar-prefetch array: unknown here
        spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(8,),
                                            in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
                                            out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)))
        return pl.pallas_call(body, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32))(idx, x)

    (t,) = _kernels(gathered, jax.ShapeDtypeStruct((8,), jnp.int32), jax.ShapeDtypeStruct((64, 128), jnp.float32))
    assert t.windows[0] is None and t.windows[1] is not None and t.refetched_bytes == 0

    def copy(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf, sem).start()
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf, sem).wait()
        o_ref[...] = buf[...]

    def own_dma(x):  # pl.ANY: the kernel's own DMAs, no window
        return pl.pallas_call(copy, grid=(8,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA])(x)

    (t,) = _kernels(own_dma, jax.ShapeDtypeStruct((64, 128), jnp.float32))
    assert t.windows[0] is None and t.windows[1] == mosaic_traffic.Window(8 * 4096, 8 * 4096)


def test_what_is_not_a_mosaic_module_gives_nothing():
    assert mosaic_traffic.body_of('backend_config="{}"') is None
    assert mosaic_traffic.traffic(b"not bytecode") is None
