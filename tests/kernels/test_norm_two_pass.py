"""mk.kernels.norm two-pass forward: softmax, RMSNorm and LayerNorm over the last axis in two passes over column
blocks (TPU and GPU, interpret mode) against reference.py, f32 and bf16, sizes the blocks divide and ones they do
not (TPU: a whole-axis block; GPU: padded and masked)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import norm as kn
from mk.kernels.norm import TwoPassConfig
from mk.targets import get_target


def _inputs(shape, dtype, seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    d = shape[-1]
    x = (jax.random.normal(k[0], shape, jnp.float32) * 2 + 0.5).astype(dtype)
    w = (1 + 0.3 * jax.random.normal(k[1], (d,), jnp.float32)).astype(dtype)
    b = (0.5 * jax.random.normal(k[2], (d,), jnp.float32)).astype(dtype)
    return x, w, b


CASES = [
    ("tpu", (64, 1024), jnp.float32, TwoPassConfig(block_rows=16, block_cols=256)),  # 4 column blocks, 4 row blocks
    ("tpu", (2, 24, 768), jnp.bfloat16, TwoPassConfig(block_rows=16, block_cols=512)),  # 768 = 3 x 256 columns
    ("tpu", (40, 1000), jnp.float32, TwoPassConfig(block_rows=64, block_cols=2048)),  # no 128-multiple divides: whole
    ("gpu", (48, 1000), jnp.float32, TwoPassConfig(block_rows=16, block_cols=256)),  # columns padded and masked
    ("gpu", (3, 7, 512), jnp.bfloat16, TwoPassConfig(block_rows=4, block_cols=128)),  # rows padded
    ("gpu", (16, 300), jnp.bfloat16, TwoPassConfig(block_rows=16, block_cols=1024)),  # one column block
]


@pytest.mark.parametrize("kind", ["softmax", "rms", "layer"])
@pytest.mark.parametrize("target,shape,dtype,cfg", CASES)
def test_matches_reference(target, shape, dtype, cfg, kind):
    x, w, b = _inputs(shape, dtype)
    w = None if kind == "softmax" else w
    b = b if kind == "layer" else None
    eps = 1e-5
    with get_target(target).execution():
        got = jax.jit(lambda *a: kn.two_pass(*a, kind=kind, eps=eps, target=target, config=cfg))(x, w, b)
    want = kn.reference.two_pass(x, w, b, kind=kind, eps=eps)
    assert got.shape == x.shape and got.dtype == x.dtype
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    tol = 2e-2 if dtype == jnp.bfloat16 else 2e-5
    assert np.abs(got - want).max() <= tol * max(1.0, np.abs(want).max()), np.abs(got - want).max()


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_out_dtype_and_large_values(target):
    """bf16 in, f32 out; softmax of values ~100 (the running max keeps the exponentials in range)."""
    x, _, _ = _inputs((16, 512), jnp.bfloat16, seed=1)
    x = (x.astype(jnp.float32) * 50).astype(jnp.bfloat16)
    fn = kn.two_pass_tpu if target == "tpu" else kn.two_pass_gpu
    with get_target(target).execution():
        got = jax.jit(lambda a: fn(a, kind="softmax", out_dtype=jnp.float32, block_rows=16, block_cols=128))(x)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.nn.softmax(x.astype(jnp.float32), axis=-1)),
                               atol=1e-6, rtol=1e-5)


def test_errors_and_config():
    x, w, _ = _inputs((8, 256), jnp.float32)
    with pytest.raises(ValueError, match="kind"):
        kn.two_pass_tpu(x, kind="max")
    with pytest.raises(ValueError, match="expected"):
        kn.two_pass_gpu(x, w[:128], kind="rms")
    with pytest.raises(ValueError, match="TPU"):
        TwoPassConfig(block_cols=200).check("tpu")
    with pytest.raises(ValueError, match="GPU"):
        TwoPassConfig(block_rows=12).check("gpu")
    for target in ("tpu", "gpu"):  # every point of the space is a legal request
        space = kn.two_pass_space(target, kn.Shapes(64, 4096, 2))
        for br in space["block_rows"]:
            for bc in space["block_cols"]:
                TwoPassConfig(block_rows=br, block_cols=bc).check(target)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lowers(target):
    x, w, b = _inputs((64, 4096), jnp.bfloat16)
    get_target(target).lower(lambda *a: kn.two_pass(*a, kind="layer", eps=1e-5, target=target), x, w, b)
