"""mk.kernels.gmm: the TPU (scalar-prefetch visits) and GPU (per-tile group loop) kernels in interpret mode against
the plain-JAX reference, for groups that share tiles, empty groups and rows past the groups' sum, in f32 and bf16."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import gmm as kgmm
from mk.kernels.gmm import Config, Shapes, default, reference, space
from mk.kernels.gmm.tpu import gmm_visits
from mk.targets import get_target


def _inputs(m, k, n, g, dtype, seed=0):
    a, b = jax.random.split(jax.random.key(seed))
    lhs = jax.random.normal(a, (m, k), jnp.float32).astype(dtype)
    rhs = (jax.random.normal(b, (g, k, n), jnp.float32) / np.sqrt(k)).astype(dtype)
    return lhs, rhs


def _check(target, lhs, rhs, sizes, cfg):
    gs = jnp.asarray(sizes, jnp.int32)
    with get_target(target).execution():
        got = np.asarray(jax.jit(lambda x, w, s: kgmm.gmm(x, w, s, target=target, config=cfg))(lhs, rhs, gs), np.float32)
    want = np.asarray(reference(lhs, rhs, gs), np.float32)
    tol = 2e-2 if lhs.dtype == jnp.bfloat16 else 1e-4
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("sizes,dtype", [
    ([64, 0, 100, 30, 62], jnp.float32),   # groups sharing tiles, an empty group
    ([10, 20, 30, 40, 50], jnp.bfloat16),  # rows past the sum come out zero
])
def test_tpu_matches_reference(sizes, dtype):
    lhs, rhs = _inputs(256, 256, 256, 5, dtype)
    _check("tpu", lhs, rhs, sizes, Config(block_m=64, block_n=128, block_k=128))


@pytest.mark.parametrize("sizes,dtype", [
    ([64, 0, 80, 30, 26], jnp.float32),    # sizes no power of two: padded
    ([200, 0, 0, 0, 0], jnp.bfloat16),
])
def test_gpu_matches_reference(sizes, dtype):
    lhs, rhs = _inputs(200, 96, 72, 5, dtype, seed=1)
    _check("gpu", lhs, rhs, sizes, Config(block_m=32, block_n=32, block_k=32))


@pytest.mark.parametrize("target,cfg", [("tpu", Config(block_m=64, block_n=128, block_k=128)),
                                        ("tpu", Config(block_m=8, block_n=128, block_k=128)),
                                        ("gpu", Config(block_m=16, block_n=32, block_k=32))])
@pytest.mark.parametrize("sizes", [[40, 50], [100, 50]])
def test_group_sizes_summing_past_m_are_clipped(target, cfg, sizes):
    """Rows past M are absent, as in the reference (a kernel-engineer attack: the TPU visit table took a group's
    start from its clipped end minus its unclipped size, so it reached back into the previous group or below 0)."""
    lhs, rhs = _inputs(64, 128, 128, 2, jnp.float32)
    _check(target, lhs, rhs, sizes, cfg)


def test_visit_table_walks_groups_in_row_order():
    group, tile, start, end = (np.asarray(a) for a in gmm_visits(jnp.asarray([64, 0, 100, 30], jnp.int32), 256, 64))
    assert len(tile) == 256 // 64 + 5 and (np.diff(tile) >= 0).all()  # tiles never revisited out of order
    assert list(zip(group[:6], tile[:6])) == [(0, 0), (2, 1), (2, 2), (3, 2), (3, 3), (4, 3)]  # 4: rows past 194
    assert (start[5:] == end[5:]).all()  # the pseudo group and the spare visits multiply no row


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_kernels_lower(target):
    lhs, rhs = _inputs(256, 128, 256, 4, jnp.bfloat16)
    gs = jnp.asarray([64, 64, 64, 64], jnp.int32)
    get_target(target).lower(lambda x, w, s: kgmm.gmm(x, w, s, target=target), lhs, rhs, gs)


def test_config_default_and_space():
    with pytest.raises(ValueError, match="block_m"):
        Config(block_m=4)
    with pytest.raises(ValueError, match="TPU blocks"):
        Config(block_n=96).check("tpu")
    with pytest.raises(ValueError, match="powers of two"):
        Config(block_m=48).check("gpu")
    full = Shapes(m=32768, k=4096, n=1536, groups=128)
    tpu = default("v6e", full)
    assert tpu.block_m == 256 and tpu.block_n == 512 and tpu.block_k >= 256  # mean group 256; two 256-wide MXUs
    assert default("v5e", full).block_n == 256
    assert default("h200", Shapes(m=512, k=128, n=128, groups=8)).block_m == 64
    for target in ("tpu", "gpu"):
        sp = space(target, full)
        assert all(k in Config.__dataclass_fields__ for k in sp) and all(sp.values())
