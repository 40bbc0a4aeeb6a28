"""mk.kernels.cross_entropy forward: the fused LM-head cross-entropy kernels (TPU and GPU, interpret mode) against
the per-token loss of reference.py, bf16 and f32, both W layouts and x transposed, sizes the blocks divide and ones
they do not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import cross_entropy as kce
from mk.kernels.cross_entropy import FwdConfig
from mk.kernels.cross_entropy.gpu import _pow2_block
from mk.kernels.cross_entropy.tpu import _fit
from mk.targets import get_target


def _inputs(t, h, v, dtype, seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k[0], (t, h), jnp.float32).astype(dtype)
    w = (jax.random.normal(k[1], (h, v), jnp.float32) * 0.3).astype(dtype)
    labels = jax.random.randint(k[2], (t,), 0, v)
    return x, w, labels


CASES = [
    ("tpu", (64, 128, 1000), jnp.bfloat16, FwdConfig(block_t=32, block_v=256)),  # V padded and masked
    ("tpu", (40, 256, 512), jnp.float32, FwdConfig(block_t=16, block_v=128)),  # T padded, 4 vocabulary blocks
    ("tpu", (24, 64, 384), jnp.bfloat16, FwdConfig(block_t=256, block_v=512)),  # blocks larger than the sizes
    ("gpu", (48, 100, 300), jnp.float32, FwdConfig(block_t=16, block_v=64, block_h=32)),  # every axis padded
    ("gpu", (64, 128, 256), jnp.bfloat16, FwdConfig(block_t=32, block_v=64, block_h=64)),
    ("gpu", (40, 64, 1000), jnp.bfloat16, FwdConfig(block_t=64, block_v=128, block_h=32, num_warps=8)),
]


@pytest.mark.parametrize("w_vocab_first", [False, True])
@pytest.mark.parametrize("target,shape,dtype,cfg", CASES)
def test_matches_reference(target, shape, dtype, cfg, w_vocab_first):
    x, w, labels = _inputs(*shape, dtype)
    w_in = w.T if w_vocab_first else w
    with get_target(target).execution():
        got = jax.jit(lambda *a: kce.cross_entropy_fwd(*a, target=target, config=cfg, w_vocab_first=w_vocab_first))(
            x, w_in, labels)
    with jax.default_matmul_precision("highest"):
        want = kce.per_token_loss(x, w, labels)
    assert got.shape == (shape[0],) and got.dtype == jnp.float32
    got, want = np.asarray(got), np.asarray(want)
    # bf16: the logits are rounded to bf16 in both; an accumulation-order difference can move one rounding step
    tol = 3e-2 if dtype == jnp.bfloat16 else 1e-4
    assert np.abs(got - want).max() <= tol * max(1.0, np.abs(want).max()), np.abs(got - want).max()


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_tokens_last_x_and_f32_logits(target):
    """x stored (H, T); bf16 inputs whose logits stay f32 (``logits_dtype``)."""
    x, w, labels = _inputs(40, 64, 384, jnp.bfloat16, seed=1)
    fn = kce.ce_fwd_tpu if target == "tpu" else kce.ce_fwd_gpu
    kw = {"block_t": 16, "block_v": 128} if target == "tpu" else {"block_t": 16, "block_v": 128, "block_h": 32}
    with get_target(target).execution():
        got = jax.jit(lambda a, b, c: fn(a, b, c, x_tokens_first=False, logits_dtype=jnp.float32, **kw))(x.T, w, labels)
    want = kce.per_token_loss(x, w, labels, jnp.float32)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-3, rtol=2e-3)


def test_large_logits_stay_accurate():
    """Logits of magnitude ~1e3: the online log-sum-exp keeps the running max apart from the sum."""
    x, w, labels = _inputs(32, 128, 640, jnp.float32, seed=2)
    x = x * 300.0
    with get_target("tpu").execution():
        got = jax.jit(lambda *a: kce.ce_fwd_tpu(*a, block_t=16, block_v=128))(x, w, labels)
    with jax.default_matmul_precision("highest"):
        want = kce.per_token_loss(x, w, labels)
    assert np.abs(np.asarray(got) - np.asarray(want)).max() <= 1e-4 * np.abs(np.asarray(want)).max()


def test_shape_errors():
    x, w, labels = _inputs(16, 128, 256, jnp.float32)
    with pytest.raises(ValueError, match="expected"):
        kce.ce_fwd_tpu(x, w.T, labels)
    with pytest.raises(ValueError, match="expected"):
        kce.ce_fwd_gpu(x, w, labels[:8])


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lowers(target):
    x, w, labels = _inputs(64, 128, 1000, jnp.bfloat16)
    get_target(target).lower(lambda *a: kce.cross_entropy_fwd(*a, target=target), x, w, labels)


def test_block_fitting_and_config():
    assert _fit(1000, 512, 128) == (512, 1024) and _fit(128256, 512, 128) == (384, 128256) and _fit(40, 256, 8) == (40, 40)
    assert _pow2_block(1000, 128) == (128, 1024) and _pow2_block(128256, 512) == (256, 128256)
    with pytest.raises(ValueError):
        FwdConfig(block_h=4)
    with pytest.raises(ValueError, match="TPU"):
        FwdConfig(block_v=200).check("tpu")
    with pytest.raises(ValueError, match="GPU"):
        FwdConfig(block_h=48).check("gpu")
    assert kce.fwd_default("v6e", kce.Shapes(8192, 4096, 128256)).block_v % 128 == 0
