"""mk.kernels.matmul: the TPU and GPU kernels (fused epilogue and split-K) in interpret mode against the plain-JAX
reference: f32 and bf16, sizes the blocks divide and sizes they do not, x @ w and x @ w.T, each parameter tiling
kind (tile, row, col, scalar), an epilogue reducing along N on whole rows, lowering, Config and space."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import matmul as kmm
from mk.kernels.matmul import Config, Shapes, default, reference, space
from mk.targets import get_target
from tests.kernels.chip_compile import compiled, fits, needs_cuda


def _inputs(m, k, n, dtype, transpose_w=False, seed=0):
    kx, kw = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (m, k), jnp.float32).astype(dtype)
    w = (jax.random.normal(kw, (n, k) if transpose_w else (k, n), jnp.float32) * k ** -0.5).astype(dtype)
    return x, w


def _run(target, x, w, *params, **kw):
    with get_target(target).execution():
        return np.asarray(jax.jit(lambda *a: kmm.matmul(*a, target=target, **kw))(x, w, *params), np.float32)


def _tol(dtype):
    return 3e-2 if dtype == jnp.bfloat16 else 1e-4


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("m,k,n,dtype,transpose_w", [
    (64, 256, 256, jnp.float32, False),
    (40, 384, 200, jnp.float32, True),  # no power of two >= 16 divides 40 or 200 (Triton pads); TPU: whole axes
    (48, 640, 128, jnp.bfloat16, False),
    (24, 200, 80, jnp.bfloat16, True),
])
def test_plain_product_matches_reference(target, m, k, n, dtype, transpose_w):
    x, w = _inputs(m, k, n, dtype, transpose_w)
    cfg = Config(block_m=16, block_n=128, block_k=128) if target == "tpu" else Config(block_m=16, block_n=32,
                                                                                      block_k=32)
    got = _run(target, x, w, transpose_w=transpose_w, config=cfg)
    want = np.asarray(reference(x, w, transpose_w=transpose_w), np.float32)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, want, atol=_tol(dtype), rtol=_tol(dtype))


def _epilogue(acc, tile, row, col, scalar):
    return jnp.tanh(acc * scalar + col) * row + tile


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("m,k,n,dtype", [(32, 256, 256, jnp.float32), (40, 384, 200, jnp.float32),
                                         (48, 256, 384, jnp.bfloat16)])
def test_each_parameter_kind_reaches_the_epilogue(target, m, k, n, dtype):
    x, w = _inputs(m, k, n, dtype)
    ks = jax.random.split(jax.random.key(1), 3)
    tile = jax.random.normal(ks[0], (m, n), jnp.float32).astype(dtype)
    row = jax.random.normal(ks[1], (m,), jnp.float32).astype(dtype)  # one value per row (1-D)
    col = jax.random.normal(ks[2], (1, n), jnp.float32).astype(dtype)  # one value per column (2-D)
    scalar = jnp.asarray([0.5], dtype)
    params = (tile, row, col, scalar)
    want = np.asarray(reference(x, w, tile, row[:, None], col, scalar[0], epilogue=_epilogue), np.float32)

    def epilogue(acc, tile_b, row_b, col_b, s):
        assert row_b.ndim == 1 and col_b.ndim == 2 and s.size == 1  # each block keeps the rank it was passed with
        return _epilogue(acc, tile_b, row_b[:, None], col_b, s.reshape(()))

    got = _run(target, x, w, *params, kinds=("tile", "row", "col", "scalar"), epilogue=epilogue)
    np.testing.assert_allclose(got, want, atol=_tol(dtype), rtol=_tol(dtype))


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("m,k,n", [(32, 256, 256), (40, 200, 100)])
def test_whole_rows_for_an_epilogue_that_reduces_along_n(target, m, k, n):
    """full_n: a program holds whole rows, the epilogue writes one value per row (GPU rows are padded: masked)."""
    x, w = _inputs(m, k, n, jnp.float32)
    bias = jnp.linspace(-1.0, 1.0, n, dtype=jnp.float32)

    def epilogue(acc, b):
        v = acc + b.reshape(b.shape[-1:])
        live = jax.lax.broadcasted_iota(jnp.int32, v.shape, 1) < n
        return jnp.max(jnp.where(live, v, -jnp.inf), axis=1, keepdims=True)

    got = _run(target, x, w, bias, kinds=("col",), epilogue=epilogue, full_n=True)
    want = np.asarray(jnp.max(reference(x, w) + bias, axis=1, keepdims=True))
    assert got.shape == (m, 1)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target,blocks", [("tpu", (64, 128, 128)), ("gpu", (32, 64, 32))])
def test_an_epilogue_that_reduces_along_n_needs_whole_rows(target, blocks):
    """Without full_n, column blocks would each overwrite the row's reduction with their own (a kernel-engineer
    attack: silently wrong by 2.4); the kernel refuses with what to do, and one block of whole rows is allowed."""
    x, w = _inputs(64, 128, 384, jnp.float32)
    cfg = Config(block_m=blocks[0], block_n=blocks[1], block_k=blocks[2])
    def ep(acc):  # GPU rows are padded to a power of two: masked
        live = jax.lax.broadcasted_iota(jnp.int32, acc.shape, 1) < 384
        return jnp.max(jnp.where(live, acc, -jnp.inf), axis=1, keepdims=True)

    with pytest.raises(ValueError, match="full_n=True"):
        _run(target, x, w, epilogue=ep, config=cfg)
    got = _run(target, x, w, epilogue=ep, config=cfg, full_n=True)
    np.testing.assert_allclose(got, np.asarray(jnp.max(reference(x, w), axis=1, keepdims=True)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("m,k,n,dtype,splits", [(32, 768, 256, jnp.float32, 2), (40, 1024, 200, jnp.float32, 8),
                                                (16, 512, 128, jnp.bfloat16, 4)])
def test_split_k_matches_reference(target, m, k, n, dtype, splits):
    x, w = _inputs(m, k, n, dtype, transpose_w=True)
    bias = jnp.ones((n,), dtype)
    ep = lambda y, b: jax.nn.gelu(y + b)  # noqa: E731
    cfg = Config(block_m=16, block_n=128, block_k=128, k_splits=splits) if target == "tpu" else \
        Config(block_m=16, block_n=64, block_k=64, k_splits=splits)
    got = _run(target, x, w, bias, epilogue=ep, transpose_w=True, splitk=True, config=cfg)
    want = np.asarray(reference(x, w, bias, epilogue=ep, transpose_w=True), np.float32)
    np.testing.assert_allclose(got, want, atol=_tol(dtype), rtol=_tol(dtype))


def test_operand_casts_and_product_dtype():
    """x cast to bf16 inside the kernel, the product rounded to bf16 before the epilogue, as the reference does."""
    x, w = _inputs(32, 256, 128, jnp.float32)
    wb = w.astype(jnp.bfloat16)
    got = _run("tpu", x, wb, x_casts=(jnp.bfloat16,), product_dtype=jnp.bfloat16)
    want = np.asarray(reference(x.astype(jnp.bfloat16), wb, product_dtype=jnp.bfloat16), np.float32)
    np.testing.assert_allclose(got, want, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_kernels_lower(target):
    x, w = _inputs(256, 512, 384, jnp.bfloat16)
    get_target(target).lower(lambda a, b: kmm.matmul(a, b, target=target), x, w)
    get_target(target).lower(lambda a, b: kmm.matmul(a, b, target=target, splitk=True), x, w)


def test_a_wrong_kind_or_shape_is_refused():
    x, w = _inputs(32, 128, 128, jnp.float32)
    with pytest.raises(ValueError, match="kinds"):
        kmm.matmul(x, w, w, target="tpu", kinds=("diagonal",))
    with pytest.raises(ValueError, match="expected x"):
        kmm.matmul_tpu(x, w.T[:64])


def test_config_validates_itself():
    with pytest.raises(ValueError, match="block_m"):
        Config(block_m=4)
    with pytest.raises(ValueError, match="k_splits"):
        Config(k_splits=0)
    with pytest.raises(ValueError, match="num_warps"):
        Config(num_warps=3)
    with pytest.raises(ValueError, match="TPU blocks"):
        Config(block_n=96).check("tpu")
    with pytest.raises(ValueError, match="GPU blocks"):
        Config(block_k=48).check("gpu")
    Config(block_m=8, block_n=256, block_k=512).check("tpu")
    Config(block_m=16, block_n=32, block_k=64).check("gpu")


def test_default_and_space_follow_the_chip_and_shapes():
    big = Shapes(m=4096, n=4096, k=4096, itemsize=2)
    tpu = space("tpu", big)
    assert tpu == {"block_m": [64, 128, 256], "block_k": [128, 256, 512], "block_n": [128, 256, 512]}
    assert tpu["block_m"][0] % big.sublanes == 0 and big.sublanes == 16
    assert "block_n" not in space("tpu", Shapes(64, 1024, 512, full_n=True))
    assert space("gpu", Shapes(64, 1024, 512), splitk=True)["k_splits"] == [2, 4, 8]
    cfg = default("v6e", big)
    assert (cfg.block_m, cfg.block_n, cfg.block_k) == (256, 512, 512)  # fits half of v6e's 128 MiB VMEM
    cfg.check("tpu")
    small_vmem = default("v5e", Shapes(m=4096, n=65536, k=4096, itemsize=4, full_n=True))
    assert small_vmem.block_k * small_vmem.block_m < 512 * 256  # whole 64k-wide rows: smaller blocks fit
    g = default("h200", big)
    g.check("gpu")
    assert g.block_m in space("gpu", big)["block_m"]
    tiny = Shapes(m=8, n=16, k=16)
    for target in ("tpu", "gpu"):
        sp = space(target, tiny)
        assert all(len(v) >= 1 for v in sp.values())


def _softmax_epilogue(n):
    def epilogue(acc, b):
        v = acc + b.reshape(b.shape[-1:])
        live = jax.lax.broadcasted_iota(jnp.int32, v.shape, 1) < n
        e = jnp.where(live, jnp.exp(v - jnp.max(jnp.where(live, v, -jnp.inf), axis=1, keepdims=True)), 0.0)
        return e / jnp.sum(e, axis=1, keepdims=True)
    return epilogue


@pytest.mark.parametrize("m,k,n,transpose_w,smem", [
    (40, 200, 300, False, 192 << 10),  # whole rows in one program (the fused form)
    (40, 200, 300, True, 4 << 10),  # rows too wide for 4 KiB: a tiled product, then the epilogue on rows
    (32, 256, 2500, False, 192 << 10),  # 4096 padded columns: over 32 f32 accumulators a thread, two passes
])
def test_whole_rows_in_one_or_two_passes_on_gpu(m, k, n, transpose_w, smem):
    """A softmax along N with each parameter kind, whether the rows fit one program or go through a second pass."""
    x, w = _inputs(m, k, n, jnp.float32, transpose_w)
    bias = jnp.linspace(-1.0, 1.0, n, dtype=jnp.float32)
    row = jnp.linspace(0.5, 1.5, m, dtype=jnp.float32)
    tile = jax.random.normal(jax.random.key(3), (m, n), jnp.float32)
    soft = _softmax_epilogue(n)

    def epilogue(acc, b, r, t, s):
        return soft(acc * s.reshape(()) + t, b) * r[:, None]

    got = _run("gpu", x, w, bias, row, tile, jnp.asarray([0.5]), kinds=("col", "row", "tile", "scalar"),
               epilogue=epilogue, transpose_w=transpose_w, full_n=True, smem_bytes=smem)
    y = reference(x, w, transpose_w=transpose_w) * 0.5 + tile + bias
    want = np.asarray(jax.nn.softmax(y, axis=1) * row[:, None])
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@needs_cuda
@pytest.mark.parametrize("transpose_w,precision", [(False, None), (True, jax.lax.Precision.HIGHEST)])
def test_whole_rows_of_8192_compile_for_h100(transpose_w, precision):
    """JaxBench's full size of the row-reducing epilogues (21k, 50k ...): 4096x8192 @ 8192x8192 with a softmax
    along N. One program of whole rows asked for 2,101,248 B of shared memory (H100: 232,448); now two kernels,
    each within shared memory and without spills (measured 48-80 KiB, 128-158 registers; the row pass 0 KiB, 32-52)."""
    m, k, n = 4096, 8192, 8192
    f = lambda x, w, b: kmm.matmul_gpu(x, w, b, kinds=("col",), epilogue=_softmax_epilogue(n), full_n=True,  # noqa: E731
                                       transpose_w=transpose_w, precision=precision, block_m=16, block_k=64)
    kernels = fits(compiled(f, jax.ShapeDtypeStruct((m, k), jnp.float32),
                            jax.ShapeDtypeStruct((n, k) if transpose_w else (k, n), jnp.float32),
                            jax.ShapeDtypeStruct((n,), jnp.float32)))
    assert len(kernels) == 2, kernels


@needs_cuda
def test_float32_default_for_h100_compiles_without_spills():
    """matmul_gelu's full size (4096^3, float32, HIGHEST: an FMA dot on Triton): the default once asked for 64x128x64
    blocks, 255 registers and about 4 KB of spills per thread on H100; it now bounds the registers of the
    accumulator and both operand slices."""
    m = k = n = 4096
    cfg = default("h100", Shapes(m, n, k, itemsize=4))
    assert cfg.block_k <= 32 and cfg.block_m * cfg.block_n + (cfg.block_m + cfg.block_n) * cfg.block_k <= 112 * 32 * cfg.num_warps
    f = lambda x, w: kmm.matmul_gpu(x, w, precision=jax.lax.Precision.HIGHEST, **cfg.kwargs("gpu"))  # noqa: E731
    fits(compiled(f, jax.ShapeDtypeStruct((m, k), jnp.float32), jax.ShapeDtypeStruct((k, n), jnp.float32)))
