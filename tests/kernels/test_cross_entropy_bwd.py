"""mk.kernels.cross_entropy: the LM-head cross-entropy backward kernels (TPU and GPU, interpret mode) against jax.vjp
of the per-token loss, bf16 and f32, vocabulary and token counts the blocks divide and ones they do not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import cross_entropy as kce
from mk.kernels.cross_entropy import Config
from mk.targets import get_target


def _inputs(t, h, v, dtype, seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (t, h), jnp.float32).astype(dtype)
    w = (jax.random.normal(k[1], (h, v), jnp.float32) * 0.2).astype(dtype)
    labels = jax.random.randint(k[2], (t,), 0, v)
    c = jax.random.normal(k[3], (t,), jnp.float32)
    return x, w, labels, c


@pytest.mark.parametrize("target,shape,dtype,cfg", [
    ("tpu", (64, 128, 1000), jnp.bfloat16, Config(block_t=32, block_v=256)),  # V padded and masked
    ("tpu", (40, 256, 512), jnp.float32, Config(block_t=16, block_v=128)),  # T padded
    ("gpu", (48, 100, 300), jnp.float32, Config(block_t=16, block_v=64)),  # every axis padded
    ("gpu", (64, 128, 256), jnp.bfloat16, Config(block_t=32, block_v=64)),
])
def test_matches_vjp(target, shape, dtype, cfg):
    x, w, labels, c = _inputs(*shape, dtype)
    prec = jax.lax.Precision.HIGHEST if dtype == jnp.float32 else None
    with get_target(target).execution():
        dx, dw = jax.jit(lambda *a: kce.cross_entropy_bwd(*a, target=target, config=cfg, precision=prec))(x, w, labels, c)
    with jax.default_matmul_precision("highest"):
        want_dx, want_dw = kce.ce_bwd(x, w, labels, c)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    for got, want in ((dx, want_dx), (dw, want_dw)):
        got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
        assert np.abs(got - want).max() <= tol * np.abs(want).max(), (np.abs(got - want).max(), np.abs(want).max())


def test_shape_errors():
    x, w, labels, c = _inputs(16, 128, 256, jnp.float32)
    with pytest.raises(ValueError, match="expected"):
        kce.ce_bwd_tpu(x, w.T, labels, c)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lowers(target):
    x, w, labels, c = _inputs(64, 128, 1000, jnp.bfloat16)
    get_target(target).lower(lambda *a: kce.cross_entropy_bwd(*a, target=target), x, w, labels, c)


def test_config():
    with pytest.raises(ValueError):
        Config(block_t=4)
    with pytest.raises(ValueError, match="TPU"):
        Config(block_v=200).check("tpu")
    assert kce.default("v6e", kce.Shapes(8192, 4096, 128256)).block_v % 128 == 0
