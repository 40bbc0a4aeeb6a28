"""mk.kernels.norm: the RMSNorm/LayerNorm backward kernels (TPU and GPU, interpret mode) against jax.vjp of the
reference, bf16 and f32, row counts the block divides and ones it does not, with and without weight/bias."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import norm as kn
from mk.kernels.norm import Config, Shapes, default, space
from mk.targets import get_target


def _inputs(shape, dtype, seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    d = shape[-1]
    x = (jax.random.normal(k[0], shape, jnp.float32) * 2 + 0.5).astype(dtype)
    g = jax.random.normal(k[1], shape, jnp.float32).astype(dtype)
    w = (1 + 0.1 * jax.random.normal(k[2], (d,), jnp.float32)).astype(dtype)
    b = (0.1 * jax.random.normal(k[3], (d,), jnp.float32)).astype(dtype)
    return x, w, b, g


def _close(got, want, dtype):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    tol = 3e-2 if dtype == jnp.bfloat16 else 1e-4
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("shape,dtype,rows", [((2, 16, 256), jnp.bfloat16, 8), ((40, 384), jnp.float32, 16),
                                              ((3, 7, 200), jnp.float32, 8)])
def test_rmsnorm_bwd(target, shape, dtype, rows):
    x, w, _, g = _inputs(shape, dtype)
    with get_target(target).execution():
        dx, dw, db = jax.jit(lambda *a: kn.norm_bwd(*a, kind="rms", eps=1e-6, target=target,
                                                     config=Config(block_rows=rows)))(x, w, None, g)
    want_dx, want_dw = kn.rmsnorm_bwd(x, w, g, 1e-6)
    assert db is None and dx.dtype == x.dtype and dw.dtype == w.dtype
    _close(dx, want_dx, dtype)
    _close(dw, want_dw, dtype)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("shape,dtype,affine", [((2, 24, 256), jnp.bfloat16, (True, True)), ((33, 128), jnp.float32, (True, True)),
                                                ((16, 128), jnp.float32, (True, False)), ((16, 100), jnp.float32, (False, False))])
def test_layernorm_bwd(target, shape, dtype, affine):
    x, w, b, g = _inputs(shape, dtype, seed=1)
    w = w if affine[0] else None
    b = b if affine[1] else None
    with get_target(target).execution():
        got = jax.jit(lambda x, w, b, g: kn.norm_bwd(x, w, b, g, kind="layer", eps=1e-5, target=target,
                                                     config=Config(block_rows=16)))(x, w, b, g)
    want = kn.layernorm_bwd(x, w, b, g, 1e-5)
    for gg, ww in zip(got, want):
        assert (gg is None) == (ww is None)
        if ww is not None:
            _close(gg, ww, dtype)


def test_wrong_kind_and_rms_bias_refused():
    x, w, b, g = _inputs((8, 128), jnp.float32)
    with pytest.raises(ValueError, match="kind"):
        kn.norm_bwd_tpu(x, w, None, g, kind="batch", eps=1e-6)
    with pytest.raises(ValueError, match="bias"):
        kn.norm_bwd_gpu(x, w, b, g, kind="rms", eps=1e-6)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lowers(target):
    x, w, b, g = _inputs((64, 512), jnp.bfloat16)
    get_target(target).lower(lambda x, w, b, g: kn.norm_bwd(x, w, b, g, kind="layer", eps=1e-5, target=target), x, w, b, g)


def test_config_default_and_space():
    with pytest.raises(ValueError):
        Config(block_rows=0)
    with pytest.raises(ValueError, match="TPU"):
        Config(block_rows=12).check("tpu")
    big = Shapes(32768, 8192, 2)
    assert default("v6e", big).block_rows >= 8 and default("h200", big).block_rows & (default("h200", big).block_rows - 1) == 0
    for t in ("tpu", "gpu"):
        assert space(t, big)["block_rows"]
