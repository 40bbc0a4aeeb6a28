"""mk.kernels.gmm.mlp_{tpu,gpu}: the grouped gated MLP (act(x @ wg[g], x @ wu[g]) @ wd[g] per row group, fused) in
interpret mode against a per-group NumPy computation, for groups that share tiles, empty groups, rows past the groups'
sum and sizes no block divides, in f32 and bf16; and mk.kernels.gmm.masked_{tpu,gpu} (unsorted, unchosen (tile,
expert) pairs skipped, the weighted combine fused) against the dense weighted sum. All kernels lower."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels.gmm.masked_gpu import masked_mlp_gpu
from mk.kernels.gmm.masked_tpu import masked_mlp_tpu
from mk.kernels.gmm.mlp_gpu import gmlp_gpu
from mk.kernels.gmm.mlp_tpu import gmlp_tpu
from mk.kernels.swiglu import Shapes, default
from mk.targets import get_target
from tests.kernels.chip_compile import compiled, fits, needs_cuda


def _want(x, wg, wu, wd, sizes):
    ends = np.cumsum(sizes)
    xf, gf, uf, df = (np.asarray(a, np.float32) for a in (x, wg, wu, wd))
    out = np.zeros((x.shape[0], wd.shape[2]), np.float32)
    for g, n in enumerate(sizes):
        rows = slice(ends[g] - n, ends[g])
        a, b = xf[rows] @ gf[g], xf[rows] @ uf[g]
        out[rows] = (a / (1.0 + np.exp(-a)) * b) @ df[g]
    return out


def _inputs(m, e, f, d, g, dtype):
    ks = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(ks[0], (m, e)).astype(dtype)
    wg = (jax.random.normal(ks[1], (g, e, f)) / np.sqrt(e)).astype(dtype)
    wu = (jax.random.normal(ks[2], (g, e, f)) / np.sqrt(e)).astype(dtype)
    wd = (jax.random.normal(ks[3], (g, f, d)) / np.sqrt(f)).astype(dtype)
    return x, wg, wu, wd


@pytest.mark.parametrize("target,fn,blocks", [("tpu", gmlp_tpu, {"block_m": 32, "block_f": 128}),
                                              ("gpu", gmlp_gpu, {"block_m": 32, "block_f": 32, "block_n": 32})])
@pytest.mark.parametrize("m,f,d,sizes,dtype", [(200, 256, 128, [64, 0, 80, 30, 20], jnp.float32),
                                               (256, 384, 96, [10, 100, 50, 60, 36], jnp.bfloat16)])
def test_matches_per_group_mlp(target, fn, blocks, m, f, d, sizes, dtype):
    x, wg, wu, wd = _inputs(m, 128, f, d, len(sizes), dtype)
    with get_target(target).execution():
        got = jax.jit(lambda *a: fn(*a, **blocks))(x, wg, wu, wd, jnp.asarray(sizes, jnp.int32))
    tol = 3e-2 if dtype == jnp.bfloat16 else 1e-4
    np.testing.assert_allclose(np.asarray(got, np.float32), _want(x, wg, wu, wd, sizes), atol=tol, rtol=tol)


@pytest.mark.parametrize("target,fn,blocks", [("tpu", gmlp_tpu, {"block_m": 64, "block_f": 128}),
                                              ("gpu", gmlp_gpu, {"block_m": 32, "block_f": 32, "block_n": 32})])
def test_group_sizes_summing_past_m_are_clipped(target, fn, blocks):
    """Rows past M are absent (the TPU kernel shares gmm's visit table, which reached back into the previous group)."""
    x, wg, wu, wd = _inputs(64, 128, 128, 128, 2, jnp.float32)
    with get_target(target).execution():
        got = jax.jit(lambda *a: fn(*a, **blocks))(x, wg, wu, wd, jnp.asarray([40, 50], jnp.int32))
    np.testing.assert_allclose(np.asarray(got, np.float32), _want(x, wg, wu, wd, [40, 24]), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target,fn", [("tpu", gmlp_tpu), ("gpu", gmlp_gpu)])
def test_kernels_lower(target, fn):
    st = jax.ShapeDtypeStruct
    args = (st((256, 128), jnp.bfloat16), st((8, 128, 256), jnp.bfloat16), st((8, 128, 256), jnp.bfloat16),
            st((8, 256, 128), jnp.bfloat16), st((8,), jnp.int32))
    get_target(target).lower(lambda *a: fn(*a), *args)


@pytest.mark.parametrize("target,fn,blocks", [("tpu", masked_mlp_tpu, {"block_m": 16, "block_f": 128}),
                                              ("gpu", masked_mlp_gpu, {"block_m": 16, "block_f": 32, "block_n": 32})])
@pytest.mark.parametrize("t,f,d,n,k,dtype", [(64, 256, 128, 8, 2, jnp.float32), (48, 384, 96, 6, 3, jnp.bfloat16)])
def test_masked_matches_weighted_dense_sum(target, fn, blocks, t, f, d, n, k, dtype):
    x, wg, wu, wd = _inputs(t, 128, f, d, n, dtype)
    vals, idx = jax.lax.top_k(jax.random.normal(jax.random.key(5), (t, n)), k)
    w = jnp.sum(jax.nn.one_hot(idx, n) * jax.nn.softmax(vals)[..., None], axis=1)  # zero outside the choices
    w = w.at[: min(t, 16)].set(w[: min(t, 16)] * (jnp.arange(n) != 0))  # expert 0 unchosen in the first tile
    xf, gf, uf, df = (np.asarray(a, np.float32) for a in (x, wg, wu, wd))
    a, b = np.einsum("te,nef->tnf", xf, gf), np.einsum("te,nef->tnf", xf, uf)
    want = np.einsum("tnd,tn->td", np.einsum("tnf,nfd->tnd", a / (1.0 + np.exp(-a)) * b, df), np.asarray(w))
    with get_target(target).execution():
        got = jax.jit(lambda *a: fn(*a, **blocks))(x, wg, wu, wd, w)
    tol = 3e-2 if dtype == jnp.bfloat16 else 1e-4
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("target,fn", [("tpu", masked_mlp_tpu), ("gpu", masked_mlp_gpu)])
def test_masked_kernels_lower(target, fn):
    st = jax.ShapeDtypeStruct
    args = (st((256, 128), jnp.bfloat16), st((8, 128, 256), jnp.bfloat16), st((8, 128, 256), jnp.bfloat16),
            st((8, 256, 128), jnp.bfloat16), st((256, 8), jnp.float32))
    get_target(target).lower(lambda *a: fn(*a), *args)


@pytest.mark.parametrize("fn", [gmlp_gpu, masked_mlp_gpu])
def test_gpu_blocks_fit_a_small_shared_memory_budget_and_stay_correct(fn):
    # a 16 KiB budget halves the requested E, hidden and column blocks; E (200) spans several E blocks
    x, wg, wu, wd = _inputs(48, 200, 160, 72, 3, jnp.bfloat16)
    blocks = {"block_m": 64, "block_f": 64, "block_n": 128, "block_e": 128, "smem_bytes": 16 << 10}
    sizes = [20, 0, 28]
    if fn is gmlp_gpu:
        last, want = jnp.asarray(sizes, jnp.int32), _want(x, wg, wu, wd, sizes)
    else:  # each token's rows weighted by one expert
        last = jax.nn.one_hot(jnp.repeat(jnp.arange(3), jnp.asarray(sizes), total_repeat_length=48), 3)
        want = _want(x, wg, wu, wd, sizes)
    with get_target("gpu").execution():
        got = jax.jit(lambda *a: fn(*a, **blocks))(x, wg, wu, wd, last)
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=3e-2, rtol=3e-2)


@needs_cuda
@pytest.mark.parametrize("fn", [gmlp_gpu, masked_mlp_gpu])
def test_gpu_kernel_written_at_ci_compiles_for_h100_at_full_size(fn):
    # the configuration the offline author writes at jaxbench 10p's ci size (32 tokens x top-2, E 128, M 256),
    # called at the full size: 8192 tokens x 2, E 4096, M 14336, 8 experts (once 2.6 MB of shared memory)
    cfg = default("h200", Shapes(m=64, e=128, f=256, d=128)).kwargs("gpu")
    st, bf16 = jax.ShapeDtypeStruct, jnp.bfloat16
    t, e, f, n = (16384 if fn is gmlp_gpu else 8192), 4096, 14336, 8
    last = st((n,), jnp.int32) if fn is gmlp_gpu else st((t, n), jnp.float32)
    structs = (st((t, e), bf16), st((n, e, f), bf16), st((n, e, f), bf16), st((n, f, e), bf16), last)
    fits(compiled(lambda *a: fn(*a, **cfg), *structs))
