"""mk.kernels.conv: the TPU and GPU kernels in interpret mode against the plain-JAX reference, at 1-3 spatial axes
and two dtypes; the kernels lower for their platforms; the Config validates itself and its space is valid."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from mk.kernels import conv as kconv
from mk.kernels.conv import Config, Shapes, default, reference, space
from mk.targets import get_target


def _inputs(x_shape, w_shape, dtype, seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k[0], x_shape, jnp.float32).astype(dtype)
    w = (jax.random.normal(k[1], w_shape, jnp.float32) / np.sqrt(np.prod(w_shape[:-1]))).astype(dtype)
    b = jax.random.normal(k[2], w_shape[-1:], jnp.float32)
    return x, w, b


def _masked_mean(v, axes, sizes):
    """mean over axes of the true sizes only (the GPU tile is padded past them)."""
    keep = jnp.ones(v.shape, bool)
    for a, n in zip(axes, sizes):
        keep &= lax.broadcasted_iota(jnp.int32, v.shape, a) < n
    return jnp.sum(jnp.where(keep, v, 0.0), axis=axes) / np.prod(sizes)


def _run(target, fn, *args):
    with get_target(target).execution():
        return np.asarray(jax.jit(fn)(*args), np.float32)


def _tol(dtype):
    return dict(atol=3e-2, rtol=3e-2) if dtype == jnp.bfloat16 else dict(atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,dtype,block_cout", [
    ((2, 10, 9, 16), (3, 3, 16, 8), jnp.float32, None),      # 2-D, odd sizes, all channels
    ((2, 12, 4), (3, 4, 256), jnp.bfloat16, 128),             # 1-D, bf16, two channel blocks
    ((1, 4, 5, 6, 3), (2, 3, 3, 3, 8), jnp.float32, None),    # 3-D, an uneven window
])
def test_tpu_bias_conv_matches_reference(x_shape, w_shape, dtype, block_cout):
    x, w, b = _inputs(x_shape, w_shape, dtype)
    cfg = Config(block_cout=block_cout, unroll=2)
    got = _run("tpu", lambda x, w, b: kconv.conv(x, w, bias=b, target="tpu", config=cfg), x, w, b)
    want = np.asarray(reference(x.astype(jnp.float32), w.astype(jnp.float32), bias=b), np.float32)
    np.testing.assert_allclose(got, want, **_tol(dtype))


def test_tpu_fused_epilogue_reduces_over_the_sample():
    """InstanceNorm-like epilogue: statistics over the spatial axes of each sample, then a per-channel scale."""
    x, w, b = _inputs((2, 7, 6, 8), (3, 2, 8, 16), jnp.float32, seed=1)

    def ep(t, bias, g):
        t = t + bias
        mu = jnp.mean(t, axis=(1, 2), keepdims=True)
        var = jnp.mean((t - mu) ** 2, axis=(1, 2), keepdims=True)
        return jnp.transpose((t - mu) * lax.rsqrt(var + 1e-5) * g, (0, 3, 1, 2))

    g = jnp.linspace(0.5, 2.0, 16)
    got = _run("tpu", lambda x, w, b, g: kconv.conv(x, w, b, g, target="tpu", epilogue=ep), x, w, b, g)
    np.testing.assert_allclose(got, np.asarray(reference(x, w, b, g, epilogue=ep)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,dtype", [
    ((2, 10, 9, 3), (3, 3, 3, 8), jnp.float32),          # sizes no power of two: padded, masked
    ((2, 5, 6, 7, 4), (3, 3, 3, 4, 24), jnp.bfloat16),    # 3-D, bf16
])
def test_gpu_fused_epilogue_matches_reference(x_shape, w_shape, dtype):
    x, w, b = _inputs(x_shape, w_shape, dtype, seed=2)
    out = tuple(n - k + 1 for n, k in zip(x_shape[1:-1], w_shape[:-2]))
    axes = tuple(range(1, len(out) + 1))

    def ep(t, bias):  # GELU, then global average pooling over the true pixels
        return _masked_mean(jax.nn.gelu(t + bias), axes, out)

    got = _run("gpu", lambda x, w, b: kconv.conv(x, w, b, target="gpu", epilogue=ep, channel_axes=[(0,)]), x, w, b)
    want = np.asarray(jnp.mean(jax.nn.gelu(reference(x.astype(jnp.float32), w.astype(jnp.float32), bias=b)),
                               axis=axes))
    np.testing.assert_allclose(got, want, **_tol(dtype))


@pytest.mark.parametrize("cout,groups", [(24, 8), (12, 4), (8, 8)])  # groups of 3 and 3 padded to 4; groups of 1
def test_gpu_channel_groups_pad_group_by_group(cout, groups):
    """channel_groups: each group of channels padded to a power of two, so the epilogue splits the padded channel
    axis into (-1, _pow2(size)); a GroupNorm then a mean over the true channels and pixels."""
    x, w, b = _inputs((2, 6, 7, 3), (3, 3, 3, cout), jnp.float32, seed=4)
    size, out = cout // groups, (4, 5)
    sp = 1 << (size - 1).bit_length()

    def ep(t, bias):
        t = t + bias
        g = t.reshape(t.shape[:3] + (-1, sp))
        keep = ((lax.broadcasted_iota(jnp.int32, g.shape, 1) < out[0]) & (lax.broadcasted_iota(jnp.int32, g.shape, 2)
                < out[1]) & (lax.broadcasted_iota(jnp.int32, g.shape, 4) < size))
        n = out[0] * out[1] * size
        mu = jnp.sum(jnp.where(keep, g, 0.0), axis=(1, 2, 4), keepdims=True) / n
        var = jnp.sum(jnp.where(keep, (g - mu) ** 2, 0.0), axis=(1, 2, 4), keepdims=True) / n
        real = keep & (lax.broadcasted_iota(jnp.int32, g.shape, 3) < groups)
        return jnp.sum(jnp.where(real, (g - mu) * lax.rsqrt(var + 1e-5) * (1.0 + g), 0.0), axis=(1, 2, 3, 4)) \
            / (n * groups)

    def want(x, w, b):
        y = reference(x, w, bias=b)
        g = y.reshape(y.shape[:3] + (groups, size))
        mu = jnp.mean(g, axis=(1, 2, 4), keepdims=True)
        var = jnp.var(g, axis=(1, 2, 4), keepdims=True)
        return jnp.mean((g - mu) * lax.rsqrt(var + 1e-5) * (1.0 + g), axis=(1, 2, 3, 4))

    got = _run("gpu", lambda x, w, b: kconv.conv(x, w, b, target="gpu", epilogue=ep, channel_axes=[(0,)],
                                                  channel_groups=(groups, size)), x, w, b)
    np.testing.assert_allclose(got, np.asarray(want(x, w, b)), atol=1e-4, rtol=1e-4)


def test_gpu_channel_blocks_match_reference():
    x, w, b = _inputs((2, 6, 5, 4), (2, 2, 4, 40), jnp.float32, seed=3)
    got = _run("gpu", lambda x, w, b: kconv.conv(x, w, bias=b, target="gpu", config=Config(block_cout=16)), x, w, b)
    np.testing.assert_allclose(got, np.asarray(reference(x, w, bias=b)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_kernels_lower_for_their_platform(target):
    x, w, b = _inputs((2, 10, 9, 16), (3, 3, 16, 8), jnp.float32)
    ep = lambda t, bias: jnp.max(jax.nn.relu(t + bias), axis=-1)  # noqa: E731 - a channel reduction
    kw = {"channel_axes": [(0,)]} if target == "gpu" else {}
    get_target(target).lower(lambda x, w, b: kconv.conv(x, w, b, target=target, epilogue=ep, **kw), x, w, b)


def test_config_validates_itself():
    with pytest.raises(ValueError, match="unroll"):
        Config(unroll=0)
    with pytest.raises(ValueError, match="num_warps"):
        Config(num_warps=3)
    fused = Shapes.of((2, 10, 9, 16), (3, 3, 16, 256), fused_epilogue=True)
    with pytest.raises(ValueError, match="all 256 output channels"):
        Config(block_cout=128).check("tpu", fused)
    with pytest.raises(ValueError, match="multiple of 128"):
        Config(block_cout=96).check("tpu", Shapes.of((2, 10, 9, 16), (3, 3, 16, 192)))
    with pytest.raises(ValueError, match="expected x"):
        Shapes.of((2, 10, 9, 16), (3, 3, 8, 8))


def test_default_reads_the_chip_and_space_is_valid():
    big = Shapes.of((64, 128, 128, 64), (3, 3, 64, 1024))  # a sample and tile past every chip's scoped VMEM
    small = default("v6e", Shapes.of((2, 10, 9, 16), (3, 3, 16, 8)))
    assert small.block_cout is None and small.unroll == 2
    v7x, v6e = default("v7x", big), default("v6e", big)
    assert v7x.block_cout is not None and v7x.block_cout % 128 == 0 and 1024 % v7x.block_cout == 0
    assert v6e.block_cout is None or v6e.block_cout >= v7x.block_cout
    # the budget is the scoped VMEM a kernel gets by default (16 MiB on v5e, 32 MiB on v6e), not the physical
    # 128 MiB: this working set fits v6e's whole but v5e only in channel blocks
    mid = Shapes.of((8, 34, 34, 64), (3, 3, 64, 1024))
    assert default("v6e", mid).block_cout is None
    assert default("v5e", mid).block_cout in (128, 256, 512)
    assert default("h200", big).block_cout == 128 and default("h200", big).num_warps == 8
    for target in ("tpu", "gpu"):
        sp = space(target, big)
        assert sp and all(k in Config.__dataclass_fields__ for k in sp)
        assert "block_cout" not in space(target, Shapes.of((2, 10, 9, 16), (3, 3, 16, 256), fused_epilogue=True))
