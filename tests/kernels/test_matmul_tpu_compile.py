"""The TPU fused-epilogue matmul with whole rows (``full_n``: the epilogue reduces or normalises along N) at JaxBench's
full sizes (4096 x 8192 x 8192 f32), compiled for real chips without them (the judge's compile stage,
mk/harness/chipcheck.py), and its column-slab accumulator in interpret mode. Once a program's weight block spanned
all of N: with the block sizes the offline author writes at ``ci`` (block_m 16, block_k 512) that was 32 MiB of
double-buffered weights, refused on v6e (32.6-33.7 MiB > 32 MiB) and v5e (> 16 MiB). Blocks are now planned at trace
time against 3/4 of the chip's scoped VMEM. The compile tests are skipped where libtpu is not installed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk import chips
from mk.kernels.matmul.tpu import matmul_blocks, matmul_tpu
from mk.targets import get_target
from tests.kernels.chip_compile import compiled, needs_libtpu, vmem

S = jax.ShapeDtypeStruct


def _compile(fn, *structs, chip):
    return vmem(compiled(fn, *structs, chip=chip))


def _gelu_softmax(acc):
    return jax.nn.softmax(jax.nn.gelu(acc), axis=1)


def _row_sum(acc, col):
    return jnp.sum(acc / 2.0 + col, axis=1, keepdims=True)


@needs_libtpu
@pytest.mark.parametrize("chip", ["v5e", "v6e"])
@pytest.mark.parametrize("case", ["softmax_ci_blocks", "row_sum_ci_blocks", "softmax_wide_rows"])
def test_whole_rows_at_jaxbench_full_size_compile(chip, case):
    x, w = S((4096, 8192), jnp.float32), S((8192, 8192), jnp.float32)
    bm = 256 if case == "softmax_wide_rows" else 16  # 256 rows: the accumulator is split into column slabs
    if case.startswith("softmax"):
        fn = lambda x, w: matmul_tpu(x, w, epilogue=_gelu_softmax, full_n=True, block_m=bm, block_k=512)  # noqa: E731
        structs = (x, w)
    else:
        fn = lambda x, w, c: matmul_tpu(x, w, c, kinds=("col",), epilogue=_row_sum, transpose_w=True,  # noqa: E731
                                        full_n=True, block_m=bm, block_k=512)
        structs = (x, w, S((8192,), jnp.float32))
    vmem = _compile(fn, *structs, chip=chip)
    assert vmem and all(v <= chips.get_chip(chip).scoped_vmem_limit * 3 // 4 + (1 << 20) for v in vmem), vmem


def test_the_plan_splits_the_rows_accumulator_into_column_slabs_when_whole_rows_do_not_fit():
    bm, bn, bk, need = matmul_blocks(4096, 8192, 8192, block_m=256, block_n=128, block_k=512, sublanes=8,
                                     budget=12 << 20, full_n=True)
    assert bn < 8192 and 8192 % bn == 0 and need <= 12 << 20
    assert matmul_blocks(4096, 8192, 8192, block_m=16, block_n=128, block_k=512, sublanes=8, budget=12 << 20,
                         full_n=True)[:3] == (16, 8192, 128)


@pytest.mark.parametrize("transpose_w", [False, True])
def test_column_slabs_match_the_reference_in_interpret_mode(transpose_w):
    m, k, n = 32, 256, 512
    kx, kw, kc = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (m, k), jnp.float32)
    w = jax.random.normal(kw, (n, k) if transpose_w else (k, n), jnp.float32) * k ** -0.5
    col = jax.random.normal(kc, (n,), jnp.float32)

    def ep(acc, c):
        return jax.nn.softmax(acc + c, axis=1)

    # a budget that holds the whole rows' accumulator but not a (block_k, N) weight block: 4 slabs of 128 columns
    budget = 300 << 10
    assert matmul_blocks(m, n, k, block_m=32, block_n=128, block_k=256, sublanes=8, budget=budget, full_n=True,
                         col_itemsizes=(4,), transpose_w=transpose_w)[1] < n
    with get_target("tpu").execution():
        got = jax.jit(lambda x, w, c: matmul_tpu(x, w, c, kinds=("col",), epilogue=ep, transpose_w=transpose_w,
                                                 full_n=True, block_m=32, block_k=256, vmem_budget=budget))(x, w, col)
    want = ep((x @ (w.T if transpose_w else w)), col)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-4)
