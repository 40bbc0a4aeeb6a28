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
from tests.kernels.chip_compile import compiled, fits, needs_cuda


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


@pytest.mark.parametrize("x_shape,w_shape,num_warps,smem", [
    ((2, 40, 9, 16), (3, 3, 16, 8), 1, 192 << 10),    # 2-D: the accumulator's registers split 64 rows into 2 blocks
    ((1, 20, 6), (3, 6, 40), 1, 4 << 10),             # 1-D: a 4 KiB budget splits rows and the 64 channels
    ((1, 9, 5, 6, 3), (2, 3, 3, 3, 8), 1, 2 << 10),   # 3-D
])
def test_gpu_rows_and_channels_fitted_at_trace_time_match_reference(x_shape, w_shape, num_warps, smem):
    from mk.kernels.conv import gpu as cgpu

    x, w, b = _inputs(x_shape, w_shape, jnp.float32, seed=5)
    s = len(x_shape) - 2
    out = tuple(cgpu._pow2(n - k + 1) for n, k in zip(x_shape[1:-1], w_shape[:s]))
    tile, _ = cgpu._conv_tile(out, 16, max(16, cgpu._pow2(w_shape[-1])), itemsize=4, num_warps=num_warps,
                              smem_bytes=smem)
    assert tile[0] < out[0]  # the pixels are tiled
    got = _run("gpu", lambda x, w, b: cgpu.conv_gpu(x, w, bias=b, num_warps=num_warps, smem_bytes=smem), x, w, b)
    np.testing.assert_allclose(got, np.asarray(reference(x, w, bias=b)), atol=1e-4, rtol=1e-4)


def test_gpu_tiles_split_the_next_spatial_axis_when_one_row_is_too_large():
    """28k at full (a transposed 3-D conv, 32 x 64 x 64 output pixels): one row of the first axis was 4096
    accumulator rows, 512 registers a thread, and H100's compile ran past 5 minutes; tiles now split the next axis
    too. Here one (16 x 16)-pixel row is over a 16 KiB budget, so tiles are (1, 4, 16), 128 of them per sample."""
    from mk.kernels.conv import gpu as cgpu

    x, w, b = _inputs((2, 3, 17, 17, 16), (2, 2, 2, 16, 16), jnp.float32, seed=7)
    tile, bc = cgpu._conv_tile((2, 16, 16), 16, 16, itemsize=4, num_warps=1, smem_bytes=16 << 10)
    assert (tile, bc) == ((1, 4, 16), 16)
    got = _run("gpu", lambda x, w, b: cgpu.conv_gpu(x, w, bias=b, num_warps=1, smem_bytes=16 << 10), x, w, b)
    np.testing.assert_allclose(got, np.asarray(reference(x, w, bias=b)), atol=1e-4, rtol=1e-4)


@needs_cuda
def test_gpu_conv_written_at_ci_compiles_for_h100_at_full_size():
    # jaxbench 18k at full: a (16384 pixels, 128 channels) f32 accumulator was over Triton's 1048576-element limit
    shapes = Shapes.of((2, 10, 9, 64), (3, 3, 64, 8), 2, fused_epilogue=False)
    cfg = default("h200", shapes).kwargs("gpu")
    x, w = jax.ShapeDtypeStruct((128, 128, 128, 64), jnp.bfloat16), jax.ShapeDtypeStruct((3, 3, 64, 128), jnp.bfloat16)
    fits(compiled(lambda x, w: kconv.gpu.conv_gpu(x, w, out_dtype=jnp.float32, **cfg), x, w))


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
    # TPU: the kernel plans rows of the first output axis (and channel blocks) for the shapes it is called with, so
    # the working set fits the chip's budget (3/4 of the scoped VMEM: 16 MiB on v5e, 32 MiB on v6e) at any size
    from mk.hardware import get_spec
    from mk.kernels import validate
    from mk.kernels.conv.tpu import conv_blocks

    for chip in ("v5e", "v6e", "v7x"):
        cfg = default(chip, big)
        assert cfg.block_cout is None or (cfg.block_cout % 128 == 0 and 1024 % cfg.block_cout == 0)
        rows, bc, need = conv_blocks((64, 128, 128, 64), (3, 3, 64, 1024), budget=validate.vmem_budget(get_spec(chip)))
        assert need <= validate.vmem_budget(get_spec(chip)) and 1 <= rows < 126 and bc == (cfg.block_cout or 1024)
    assert default("h200", big).block_cout == 128 and default("h200", big).num_warps == 8
    for target in ("tpu", "gpu"):
        sp = space(target, big)
        assert sp and all(k in Config.__dataclass_fields__ for k in sp)
        assert "block_cout" not in space(target, Shapes.of((2, 10, 9, 16), (3, 3, 16, 256), fused_epilogue=True))


# --- transposed convolutions: a stride-1 conv over the zero-dilated, padded input with the window flipped --------


def _dilated(x, stride, pad):
    """x (N, *S, C) with stride - 1 zeros between its pixels and pad zeros on every spatial side."""
    cfg = ((0, 0, 0), *((pad, pad, stride - 1),) * (x.ndim - 2), (0, 0, 0))
    return lax.pad(x, jnp.zeros((), x.dtype), cfg)


def _transposed(x, w, stride, pad):
    """The transposed convolution as XLA writes it (lhs dilation), independent of _dilated: w (*K, Cin, Cout)."""
    s = x.ndim - 2
    k = w.shape[:s]
    specs = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC")}[s]
    return lax.conv_general_dilated(x, lax.rev(w, tuple(range(s))), (1,) * s, [(n - 1 - pad, n - 1 - pad) for n in k],
                                    lhs_dilation=(stride,) * s, dimension_numbers=specs)


def _layer_norm_last(t, eps=1e-5):
    """LayerNorm over the last spatial axis of a channels-last tile (1, *O, C), as a transposed-conv block does it
    after moving channels first: the axis is a pixel axis, not the channels."""
    mu = jnp.mean(t, axis=-2, keepdims=True)
    return (t - mu) * lax.rsqrt(jnp.mean((t - mu) ** 2, axis=-2, keepdims=True) + eps)


@pytest.mark.parametrize("x_shape,window,cout,stride,pad", [
    ((2, 5, 8), (4,), 16, 2, 1),          # 1-D, stride 2, kernel 4, padding 1: twice the width
    ((1, 3, 4, 8), (3, 3), 8, 3, 0),      # 2-D, stride 3 (two zeros between pixels), no padding
])
def test_tpu_transposed_conv_with_pixel_layer_norm(x_shape, window, cout, stride, pad):
    x, w, b = _inputs(x_shape, (*window, x_shape[-1], cout), jnp.float32, seed=5)
    xd = _dilated(x, stride, window[0] - 1 - pad)
    ep = lambda t, bias: jax.nn.gelu(_layer_norm_last(t + bias)) * 0.5  # noqa: E731
    got = _run("tpu", lambda x, w, b: kconv.conv(x, lax.rev(w, tuple(range(len(window)))), b, target="tpu",
                                                 epilogue=ep), xd, w, b)
    np.testing.assert_allclose(got, np.asarray(ep(_transposed(x, w, stride, pad), b)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("x_shape,window,cout,stride,pad", [
    ((2, 5, 8), (4,), 6, 2, 1),           # 1-D: output width 10, padded to 16 on the Triton tile
])
def test_gpu_transposed_conv_with_pixel_layer_norm(x_shape, window, cout, stride, pad):
    """The LayerNorm runs over the padded last pixel axis: its statistics mask the padding, and its weight (of
    that axis's size) is padded to the tile's power of two like any non-channel axis of an epilogue input."""
    x, w, b = _inputs(x_shape, (*window, x_shape[-1], cout), jnp.float32, seed=6)
    wo = (x_shape[-2] - 1) * stride + window[-1] - 2 * pad
    g = jnp.linspace(0.5, 1.5, wo)
    xd = _dilated(x, stride, window[0] - 1 - pad)

    def ep(t, bias, g):
        t = t + bias
        keep = lax.broadcasted_iota(jnp.int32, t.shape, t.ndim - 2) < wo
        mu = jnp.sum(jnp.where(keep, t, 0.0), axis=-2, keepdims=True) / wo
        var = jnp.sum(jnp.where(keep, (t - mu) ** 2, 0.0), axis=-2, keepdims=True) / wo
        return jax.nn.gelu((t - mu) * lax.rsqrt(var + 1e-5) * g[:, None])

    got = _run("gpu", lambda x, w, b, g: kconv.conv(x, lax.rev(w, tuple(range(len(window)))), b, g, target="gpu",
                                                    epilogue=ep, channel_axes=[(0,), ()]), xd, w, b, g)
    want = jax.nn.gelu(_layer_norm_last(_transposed(x, w, stride, pad) + b) * g[:, None])
    np.testing.assert_allclose(got, np.asarray(want), atol=1e-4, rtol=1e-4)


# --- the recogniser reads a transposed convolution's input dilation and window flip ------------------------------


def _operands(fn, *shapes):
    """The conv recogniser's reading of the image and window operands of ``fn``'s one convolution."""
    from mk.author import conv as author

    jaxpr = jax.make_jaxpr(fn)(*(jnp.zeros(sh, jnp.float32) for sh in shapes)).jaxpr
    eqn = author._conv_eqn(jaxpr)
    producers = {o: e for e in jaxpr.eqns for o in e.outvars}
    return [author._trace_back(eqn.invars[k], producers, list(jaxpr.invars), set()) for k in (0, 1)]


def _nwc(x, w):
    return lax.conv_general_dilated(x, w, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"))


def test_recogniser_reads_a_strided_set_into_zeros_as_a_dilation():
    def fn(x, w):  # x (N, C, W): channels last, 2 zeros between pixels from offset 1, then padded by 2
        xt = jnp.transpose(x, (0, 2, 1))
        d = jnp.zeros((2, 15, 4), jnp.float32).at[:, 1::3, :].set(xt)
        return _nwc(jnp.pad(d, ((0, 0), (2, 2), (0, 0))), jnp.transpose(w, (2, 0, 1))[::-1])

    x_op, w_op = _operands(fn, (2, 4, 5), (4, 8, 3))
    assert x_op.axes == (0, 2, 1) and x_op.pads == ((0, 0, 0), (3, 3, 2), (0, 0, 0))  # 15 = 1 + 3 * 4 + 2
    assert w_op.flips == (0,) and w_op.pads is None
    x = jax.random.normal(jax.random.key(0), (2, 4, 5))
    want = lax.pad(jnp.transpose(x, (0, 2, 1)), 0.0, x_op.pads)
    got = jnp.pad(jnp.zeros((2, 15, 4)).at[:, 1::3, :].set(jnp.transpose(x, (0, 2, 1))), ((0, 0), (2, 2), (0, 0)))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("build,reason", [
    (lambda xt: jnp.ones((2, 9, 4)).at[:, ::2].set(xt), "not zeros"),                       # a base of ones
    (lambda xt: jnp.zeros((2, 9, 4)).at[:, ::2].add(xt), "scatter-add"),                     # adds, not sets
    (lambda xt: jnp.zeros((2, 9, 4)).at[:, lax.iota(jnp.int32, 5) ** 2 // 3].set(xt), "strided"),  # uneven gaps
    (lambda xt: jnp.zeros((2, 9, 4)).at[:, jnp.array([0, 2, 4, 6, 8])].set(xt), "not index arithmetic"),
    (lambda xt: lax.pad(jnp.pad(xt, ((0, 0), (1, 1), (0, 0))), 0.0, ((0, 0, 0), (0, 0, 1), (0, 0, 0))),
     "dilated after it is padded"),
    (lambda xt: jnp.pad(xt, ((0, 0), (2, 2), (0, 0)), constant_values=1.0), "other than zero"),
])
def test_recogniser_declines_data_movement_that_is_not_a_zero_dilation(build, reason):
    from mk.author.emit import Unsupported

    with pytest.raises(Unsupported, match=reason):
        _operands(lambda x, w: _nwc(build(jnp.transpose(x, (0, 2, 1))), w), (2, 4, 5), (3, 4, 8))


def test_author_writes_the_transposed_conv_task_standalone_and_general():
    """28k (ConvTranspose3d as a conv over the dilated input, then LayerNorm over the output W, GELU, scaling):
    the written file dilates and pads in XLA, flips the window, and fuses the rest; right at sizes never traced."""
    import dataclasses

    from mk.author import conv as author
    from mk.author.trace import trace_scales
    from mk.harness.static import check_source
    from mk.loaders import load_task

    task = load_task("jaxbench:28k_ConvTranspose3d_LayerNorm_GELU_Scaling")
    task = task.with_scales({"ci": task.scale("ci")})
    prop = author.propose(task, trace_scales(task), "gpu")[0]
    assert prop.name == "conv-epilogue-gpu" and "import mk" not in prop.source
    assert "lax.pad(x, jnp.zeros((), x.dtype), ((0, 0, 0), (2, 2, 1), (2, 2, 1), (2, 2, 1), (0, 0, 0)))" in prop.source
    assert "w = lax.rev(w, (0, 1, 2))" in prop.source
    assert check_source(prop.source, target="gpu", require_pallas=True).ok
    ci = task.scale("ci")
    moved = task.with_scales({"ci": dataclasses.replace(ci, dims={**ci.dims, "N": 1, "D": 2, "H": 3, "Cout": 5})})
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    xs = moved.make_inputs("ci", 1, "normal")
    want = np.asarray(moved.bind(moved.reference, "ci")(*xs), np.float32)
    got = _run("gpu", moved.bind(lambda *a: ns["kernel"](*a), "ci"), *xs)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def _conv_transpose_reference(x, conv_weight, conv_bias, ln_weight, ln_bias, stride, padding, kernel_size, eps,
                              scaling_factor):
    """28k's reference with the input dilation left to the convolution (lhs_dilation, as lax.conv_transpose)."""
    q = kernel_size - 1 - padding
    y = lax.conv_general_dilated(jnp.transpose(x, (0, 2, 3, 4, 1)),
                                 jnp.transpose(conv_weight, (2, 3, 4, 1, 0))[::-1, ::-1, ::-1], (1, 1, 1),
                                 [(q, q)] * 3, lhs_dilation=(stride,) * 3, dimension_numbers=("NDHWC", "DHWOI", "NDHWC"))
    y = jnp.transpose(y + conv_bias, (0, 4, 1, 2, 3))
    mu, var = jnp.mean(y, axis=-1, keepdims=True), jnp.var(y, axis=-1, keepdims=True)
    return jax.nn.gelu((y - mu) / jnp.sqrt(var + eps) * ln_weight + ln_bias) * scaling_factor


def test_author_reads_lhs_dilation_like_a_scatter_into_zeros():
    """The convolution's own input dilation writes the same kernel as the dilated copy the reference builds."""
    import dataclasses

    from mk.author import conv as author
    from mk.author.trace import trace_scales
    from mk.loaders import load_task

    task = load_task("jaxbench:28k_ConvTranspose3d_LayerNorm_GELU_Scaling")
    task = task.with_scales({"ci": task.scale("ci")})
    other = dataclasses.replace(task, reference=_conv_transpose_reference)
    assert author.propose(other, trace_scales(other), "tpu")[0].source == \
        author.propose(task, trace_scales(task), "tpu")[0].source


# --- row blocks: a small VMEM budget forces several (ragged) row blocks per sample ---------------------------------


@pytest.mark.parametrize("x_shape,w_shape,block_rows,block_cout", [
    ((2, 11, 9, 16), (3, 3, 16, 256), 3, 128),   # 2-D: 9 output rows in blocks of 3, two channel blocks
    ((2, 12, 9, 16), (3, 2, 16, 8), 4, None),    # 10 rows in blocks of 4: a ragged last block
    ((2, 29, 4), (3, 4, 8), 8, None),            # 1-D: 27 rows in blocks of 8 (the sublanes)
    ((1, 7, 5, 6, 3), (2, 3, 3, 3, 8), 2, None),  # 3-D
])
def test_tpu_row_blocks_match_reference(x_shape, w_shape, block_rows, block_cout):
    x, w, b = _inputs(x_shape, w_shape, jnp.float32, seed=5)
    got = _run("tpu", lambda x, w, b: kconv.conv_tpu(x, w, bias=b, block_rows=block_rows, block_cout=block_cout),
               x, w, b)
    np.testing.assert_allclose(got, np.asarray(reference(x, w, bias=b)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("rows_independent", [True, False])
def test_tpu_fused_epilogue_over_row_blocks(rows_independent):
    """An epilogue that keeps rows apart (a norm over channels, NCHW out) runs per row block; one with statistics
    over the sample (rows_independent=False) gets the whole sample's tile, filled block by block."""
    x, w, b = _inputs((2, 12, 9, 8), (3, 2, 8, 16), jnp.float32, seed=6)

    def per_row(t, bias):
        t = t + bias
        mu = jnp.mean(t, axis=-1, keepdims=True)
        return jnp.transpose(jax.nn.gelu(t - mu), (0, 3, 1, 2))

    def per_sample(t, bias):
        t = t + bias
        return jnp.transpose(t - jnp.mean(t, axis=(1, 2), keepdims=True), (0, 3, 1, 2))

    ep = per_row if rows_independent else per_sample
    got = _run("tpu", lambda x, w, b: kconv.conv_tpu(x, w, b, epilogue=ep, block_rows=4,
                                                      rows_independent=rows_independent), x, w, b)
    np.testing.assert_allclose(got, np.asarray(reference(x, w, b, epilogue=ep)), atol=1e-4, rtol=1e-4)


def test_tpu_blocks_fit_the_budget_at_any_size():
    """The planner's working set at a large size (VMEM padding counted) fits 3/4 of v5e's 16 MiB scoped VMEM."""
    from mk.kernels.conv.tpu import conv_blocks

    for x_shape, w_shape in [((128, 130, 130, 64), (3, 3, 64, 128)), ((8, 100_002, 64), (3, 64, 256))]:
        for epilogue in (False, True):
            rows, bc, need = conv_blocks(x_shape, w_shape, budget=12 << 20, epilogue=epilogue)
            assert need <= 12 << 20 and rows < x_shape[1]
    # one row of the first axis past the budget (a 66 x 66 plane of 32 channels, lane-padded to 128, with its halo):
    # the fewest rows, and the kernel raises its VMEM limit for them (within the physical VMEM)
    rows, bc, need = conv_blocks((16, 34, 66, 66, 32), (3, 3, 3, 32, 64), budget=12 << 20)
    assert rows == 1 and need < 64 << 20
