"""The 33 KernelBench-style tasks of the built-in jaxbench suite (18k_... to 50k_...).

Each task module's reference is checked against an independent float64 numpy
implementation of the published semantics on its ``ci`` inputs (native inits
and a normal-distribution override), and its ``full`` scale against the
published input shapes, static arguments, output shape/dtype and tolerances
(``jax.eval_shape``: nothing is allocated).
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import jax
import numpy as np
import pytest

from mk.task import Task

SUITE_DIR = Path(__file__).resolve().parents[1] / "data" / "jaxbench"

# Published facts: id -> (full input shapes, static args, (output shape, dtype), (atol, rtol)).
FACTS = {
    "18k_Conv2D_ReLU_BiasAdd": (((128, 64, 128, 128), (128, 64, 3, 3), (128,), (128, 1, 1)), (), ((128, 128, 126, 126), "float32"), (0.01, 0.01)),
    "19k_Matmul_Subtract_Multiply_ReLU": (((4096, 8192), (8192, 8192), (8192,)), (("subtract_value", 2.0), ("multiply_value", 1.5)), ((4096, 8192), "float32"), (0.01, 0.01)),
    "20k_Gemm_Multiply_LeakyReLU": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "21k_Gemm_Divide_Sum_Scaling": (((4096, 8192), (8192, 8192)), (("scaling_factor", 1.5),), ((4096, 1), "float32"), (0.1, 0.1)),
    "22k_Conv2d_InstanceNorm_Divide": (((128, 64, 128, 128), (128, 64, 3, 3), (128,), (128,), (128,)), (("divide_by_value", 2.0),), ((128, 128, 126, 126), "float32"), (0.01, 0.01)),
    "23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 1), "float32"), (0.01, 0.01)),
    "24k_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish": (((4096, 8192), (8192, 8192), (8192,)), (("scale_factor", 2.0), ("clamp_min", -10.0), ("clamp_max", 10.0)), ((4096, 1), "float32"), (0.01, 0.01)),
    "25k_Conv3d_GroupNorm_Mean": (((128, 3, 24, 32, 32), (24, 3, 3, 3, 3), (24,), (24,), (24,)), (), ((128,), "float32"), (0.01, 0.01)),
    "26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply": (((4096, 8192), (4096, 8192), (8192, 8192), (8192,), (8192,), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "27k_Matmul_Mish_Mish": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "28k_ConvTranspose3d_LayerNorm_GELU_Scaling": (((32, 32, 16, 32, 32), (32, 64, 4, 4, 4), (64,), (64,), (64,)), (("stride", 2), ("padding", 1), ("kernel_size", 4), ("eps", 1e-05), ("scaling_factor", 1.0)), ((32, 64, 32, 64, 64), "float32"), (0.05, 0.01)),
    "29k_Matmul_Swish_Sum_GroupNorm": (((8192, 4096), (4096, 4096), (4096,), (4096,), (4096,)), (("num_groups", 64), ("out_features", 4096)), ((8192, 4096), "float32"), (0.01, 0.01)),
    "30k_Matmul_Scaling_ResidualAdd": (((16384, 4096), (4096, 4096), (4096,)), (), ((16384, 4096), "float32"), (0.01, 0.01)),
    "31k_Gemm_BatchNorm_GELU_ReLU": (((16384, 8192), (8192, 8192), (8192,), (8192,), (8192,)), (), ((16384, 8192), "float32"), (0.05, 0.01)),
    "32k_Gemm_Sigmoid_LogSumExp": (((16384, 2048), (4096, 2048), (4096,), (1024, 4096), (1024,)), (), ((16384,), "float32"), (0.01, 0.01)),
    "33k_Conv3d_Mish_Tanh": (((16, 32, 32, 64, 64), (64, 32, 3, 3, 3), (64,)), (), ((16, 64, 30, 62, 62), "float32"), (0.01, 0.01)),
    "34k_Conv2d_Activation_BatchNorm": (((64, 64, 128, 128), (128, 64, 3, 3), (128,), (128,), (128,)), (), ((64, 128, 126, 126), "float32"), (0.1, 0.01)),
    "35k_Gemm_Scaling_Hardtanh_GELU": (((4096, 8192), (8192, 8192), (8192,)), (("scaling_factor", 0.5), ("hardtanh_min", -2), ("hardtanh_max", 2)), ((4096, 8192), "float32"), (0.01, 0.01)),
    "36k_Matmul_Sigmoid_Sum": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 1), "float32"), (0.01, 0.01)),
    "37k_Matmul_Swish_Scaling": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "38k_Matmul_Dropout_Softmax": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "39k_Conv2d_GELU_GlobalAvgPool": (((128, 8, 256, 256), (64, 8, 3, 3), (64,)), (), ((128, 64), "float32"), (0.01, 0.01)),
    "40k_Gemm_GroupNorm_Min_BiasAdd": (((4096, 8192), (8192, 8192), (8192,), (8192,), (8192,), (1, 8192, 1, 1)), (), ((1, 8192, 4096, 1), "float32"), (0.01, 0.01)),
    "41k_Gemm_Add_ReLU": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "42k_Gemm_Max_Subtract_GELU": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "43k_Gemm_BatchNorm_Scaling_Softmax": (((4096, 8192), (8192, 8192), (8192,), (8192,), (8192,), (8192,), (8192,), (1,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "44k_Matmul_Divide_GELU": (((4096, 8192), (8192, 8192), (8192,)), (("divisor", 10.0),), ((4096, 8192), "float32"), (0.01, 0.01)),
    "45k_Gemm_GroupNorm_Swish_Multiply_Swish": (((4096, 8192), (8192, 8192), (8192,), (8192,), (8192,), (8192,)), (("num_groups", 256), ("out_features", 8192)), ((4096, 8192), "float32"), (0.05, 0.01)),
    "46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp": (((128, 8, 128, 128), (64, 8, 3, 3), (64,), (64,), (64,)), (), ((128, 1, 126, 126), "float32"), (0.01, 0.01)),
    "47k_Matmul_Add_Swish_Tanh_GELU_Hardtanh": (((4096, 8192), (8192, 8192), (8192,), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "48k_Matmul_BatchNorm_BiasAdd_Divide_Swish": (((4096, 8192), (8192, 8192), (8192,), (8192,), (8192,), (8192,), (8192,), (1,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
    "49k_Matmul_AvgPool_GELU_Scale_Max": (((4096, 8192), (8192, 8192), (8192,)), (("pool_kernel_size", 16), ("scale_factor", 2.0)), ((4096,), "float32"), (0.01, 0.01)),
    "50k_Matmul_GELU_Softmax": (((4096, 8192), (8192, 8192), (8192,)), (), ((4096, 8192), "float32"), (0.01, 0.01)),
}  # fmt: skip

IDS = list(FACTS)


def _load(task_id: str) -> Task:
    path = SUITE_DIR / f"{task_id}.py"
    spec = importlib.util.spec_from_file_location(f"_test_jaxbench_{task_id}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TASK


# --- float64 numpy building blocks --------------------------------------------


def _sigmoid(h):
    return 0.5 * (1.0 + np.tanh(0.5 * h))  # = 1 / (1 + exp(-h)), without overflow


def _softplus(h):
    return np.logaddexp(h, 0.0)


def _mish(h):
    return h * np.tanh(_softplus(h))


def _gelu_tanh(h):
    return 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h**3)))


def _lse(h, axis, keepdims=False):
    m = np.max(h, axis=axis, keepdims=True)
    out = m + np.log(np.sum(np.exp(h - m), axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def _softmax(h, axis):
    e = np.exp(h - np.max(h, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _norm(h, axes, eps=1e-5):
    """(h - mean) / sqrt(biased var + eps) over ``axes``."""
    mu = h.mean(axis=axes, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=axes, keepdims=True)
    return (h - mu) / np.sqrt(var + eps)


def _group_norm_rows(h, groups, eps=1e-5):
    """GroupNorm of (B, F) rows in ``groups`` blocks of consecutive features."""
    b, f = h.shape
    return _norm(h.reshape(b, groups, f // groups), (2,), eps).reshape(b, f)


def _group_norm_channels(y, groups, eps=1e-5):
    """GroupNorm of (N, C, *spatial) over (channels in group, *spatial)."""
    n, c = y.shape[:2]
    g = y.reshape(n, groups, c // groups, *y.shape[2:])
    return _norm(g, tuple(range(2, g.ndim)), eps).reshape(y.shape)


def _conv(x, w):
    """Cross-correlation, stride 1, VALID: x (N, Cin, *S), w (Cout, Cin, *K) -> (N, Cout, *S-K+1).
    Summed over kernel offsets, one einsum per offset."""
    ks = w.shape[2:]
    out_sp = tuple(s - k + 1 for s, k in zip(x.shape[2:], ks))
    out = np.zeros((x.shape[0], w.shape[0], *out_sp))
    for off in itertools.product(*(range(k) for k in ks)):
        win = x[(slice(None), slice(None), *(slice(o, o + n) for o, n in zip(off, out_sp)))]
        out += np.einsum("nc...,oc->no...", win, w[(slice(None), slice(None), *off)])
    return out


def _conv_transpose(x, w, stride, padding):
    """PyTorch ConvTranspose: x (N, Cin, *S), w (Cin, Cout, *K); each input element scatters
    x * w[..., kk] to output o = stride * i - padding + kk."""
    ks = w.shape[2:]
    full_sp = tuple((s - 1) * stride + k for s, k in zip(x.shape[2:], ks))
    buf = np.zeros((x.shape[0], w.shape[1], *full_sp))
    for off in itertools.product(*(range(k) for k in ks)):
        dst = tuple(slice(o, o + (s - 1) * stride + 1, stride) for o, s in zip(off, x.shape[2:]))
        buf[(slice(None), slice(None), *dst)] += np.einsum("nc...,co->no...", x, w[(slice(None), slice(None), *off)])
    crop = tuple(slice(padding, n - padding) for n in full_sp)
    return buf[(slice(None), slice(None), *crop)]


# --- independent implementations, keyed by task id ---------------------------


def _chan(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def np_18k(x, w, cb, b):
    y = _conv(x, w) + _chan(cb, 4)
    return np.maximum(y, 0.0) + b[None]


def np_19k(x, w, b, sub, mul):
    return np.maximum((x @ w + b - sub) * mul, 0.0)


def np_20k(x, w, b):
    z = 2.0 * (x @ w + b)
    return np.where(z >= 0, z, 0.1 * z)


def np_21k(x, w, scale):
    return (x @ w.T / 2.0).sum(axis=1, keepdims=True) * scale


def np_22k(x, w, cb, iw, ib, div):
    y = _norm(_conv(x, w) + _chan(cb, 4), (2, 3))
    return (y * _chan(iw, 4) + _chan(ib, 4)) / div


def np_23k(x, w, b):
    return (x @ w.T + b).sum(axis=1, keepdims=True)  # max/mean/lse over a size-1 axis are identities


def np_24k(x, w, b, scale, lo, hi):
    h = np.clip((x @ w.T + b) * scale * 2.0, lo, hi)
    l = _lse(h, 1, keepdims=True)
    return l * l * np.tanh(_softplus(l))


def np_25k(x, w, cb, gamma, beta):
    y = _group_norm_channels(_conv(x, w) + _chan(cb, 5), 8)
    y = y * _chan(gamma, 5) + _chan(beta, 5)
    return y.reshape(y.shape[0], -1).mean(axis=1)


def np_26k(x, y, w, b, iw, ib):
    h = x @ w.T + b
    z = (h - h) / np.sqrt(0.0 + 1e-5) * iw + ib  # instance norm over two singleton axes: exactly 0
    return (z + y) * y


def np_27k(x, w, b):
    return _mish(_mish(x @ w + b))


def np_28k(x, w, cb, lw, lb, stride, padding, kernel_size, eps, scale):
    assert w.shape[2:] == (kernel_size,) * 3
    y = _conv_transpose(x, w, stride, padding) + _chan(cb, 5)
    y = _norm(y, (4,), eps) * lw + lb
    return _gelu_tanh(y) * scale


def np_29k(x, w, b, gw, gb, groups, feats):
    h = x @ w
    h = h * _sigmoid(h) + b
    assert h.shape[1] == feats
    return _group_norm_rows(h, groups) * gw + gb


def np_30k(x, w, b):
    return 1.5 * (x @ w + b)


def np_31k(x, w, b, bw, bb):
    h = _norm(x @ w.T + b, (0,)) * bw + bb
    return np.maximum(_gelu_tanh(h), 0.0)


def np_32k(x, w1, b1, w2, b2):
    h = _sigmoid(x @ w1.T + b1)
    return _lse(h @ w2.T + b2, 1)


def np_33k(x, w, b):
    return np.tanh(_mish(_conv(x, w) + _chan(b, 5)))


def np_34k(x, w, cb, bw, bb):
    y = _mish(_conv(x, w) + _chan(cb, 4))
    return _norm(y, (0, 2, 3)) * _chan(bw, 4) + _chan(bb, 4)


def np_35k(x, w, b, scale, lo, hi):
    return _gelu_tanh(np.clip((x @ w + b) * scale, lo, hi))


def np_36k(x, w, b):
    return _sigmoid(x @ w + b).sum(axis=1, keepdims=True)


def np_37k(x, w, b):
    h = x @ w + b
    return 2.0 * h * _sigmoid(h)


def np_38k(x, w, b):
    return _softmax(x @ w.T + b, 1)


def np_39k(x, w, b):
    return _gelu_tanh(_conv(x, w) + _chan(b, 4)).mean(axis=(2, 3))


def np_40k(x, w, lb, gw, gb, bias):
    h = _group_norm_rows(x @ w.T + lb, 512) * gw + gb
    m = h.min(axis=1)
    return (m[None, :] + bias[0, :, 0, 0][:, None])[None, :, :, None]


def np_41k(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def np_42k(x, w, b):
    h = x @ w + b
    return _gelu_tanh(h - h.max(axis=1, keepdims=True))


def np_43k(x, w, b, s, bb, m, v, scale):
    h = s * (x @ w + b - m) / np.sqrt(v + 1e-5) + bb
    return _softmax(scale[0] * h, 1)


def np_44k(x, w, b, div):
    return _gelu_tanh((x @ w + b) / div)


def np_45k(x, w, b, gw, gb, mw, groups, feats):
    h = x @ w.T + b
    assert h.shape[1] == feats
    h = _group_norm_rows(h, groups) * gw + gb
    h = h * _sigmoid(h) * mw
    return h * _sigmoid(h)


def np_46k(x, w, cb, gw, gb):
    xc = _conv(x, w) + _chan(cb, 4)
    t = np.tanh(_group_norm_channels(xc, 16) * _chan(gw, 4) + _chan(gb, 4))
    return _lse(xc + t * np.clip(t + 3.0, 0.0, 6.0) / 6.0, 1, keepdims=True)


def np_47k(x, w, b, a):
    h = x @ w + b + a
    return np.clip(_gelu_tanh(np.tanh(h * _sigmoid(h))), -1.0, 1.0)


def np_48k(x, w, lb, s, bb, m, v, bias):
    h = s * (x @ w + lb - m) / np.sqrt(v + 1e-5) + bb + bias[0]
    return h * _sigmoid(h)


def np_49k(x, w, b, k, scale):
    h = x @ w + b
    p = h.reshape(h.shape[0], -1, k).mean(axis=2)
    return (_gelu_tanh(p) * scale).max(axis=1)


def np_50k(x, w, b):
    return _softmax(_gelu_tanh(x @ w + b), 1)


NUMPY = {tid: globals()["np_" + tid.split("_", 1)[0]] for tid in IDS}


# --- tests --------------------------------------------------------------------


def test_every_kernelbench_task_has_a_module():
    on_disk = {p.stem for p in SUITE_DIR.glob("*k_*.py")}
    assert set(IDS) <= on_disk, sorted(set(IDS) - on_disk)
    assert len(IDS) == 33


@pytest.mark.parametrize("task_id", IDS)
def test_full_scale_matches_published_facts(task_id):
    task = _load(task_id)
    shapes, static, (out_shape, out_dtype), (atol, rtol) = FACTS[task_id]
    assert task.name == task_id and task.kind == "builtin" and task.default_scale == "full"
    assert set(task.scales) == {"full", "ci"}
    assert tuple(tuple(s) for s in task.shapes("full")) == shapes
    assert all(a.dtype == "float32" for a in task.args)
    assert tuple((s.name, s.value) for s in task.static) == static
    assert tuple(task.static_values("full")) == tuple(v for _, v in static)
    assert task.tolerance.for_output(0) == (atol, rtol)
    assert task.description
    out = task.output_structs("full")
    assert tuple(out.shape) == out_shape and str(out.dtype) == out_dtype


@pytest.mark.parametrize("distribution", ["native", "normal"])
@pytest.mark.parametrize("task_id", IDS)
def test_reference_matches_independent_numpy(task_id, distribution):
    task = _load(task_id)
    inputs = task.make_inputs("ci", seed=3, distribution=distribution)
    # A variance input must stay positive (a normal draw would make the reference NaN).
    inputs = [np.abs(a) if spec.name.endswith("_var") else a for spec, a in zip(task.args, inputs)]
    static = task.static_values("ci")
    got = np.asarray(jax.jit(task.bind(task.reference, "ci"))(*inputs))
    want = NUMPY[task_id](*[np.asarray(a, np.float64) for a in inputs], *static)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.all(np.isfinite(got))
    atol, rtol = task.tolerance.for_output(0)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
    if want.size > 1 and np.std(want) > 0:
        # Much tighter than the task tolerance: the structure, not just the scale, must agree.
        err = np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30)
        assert err < 2e-3, f"max error {err:.2e} of the output's range"


def test_25k_quirk_output_is_mean_beta_when_gamma_is_one():
    task = _load("25k_Conv3d_GroupNorm_Mean")
    x, w, cb, gamma, beta = task.make_inputs("ci", seed=1)
    assert np.all(gamma == 1.0)
    out = np.asarray(jax.jit(task.reference)(x, w, cb, gamma, beta))
    np.testing.assert_allclose(out, np.full(out.shape, beta.astype(np.float64).mean()), atol=1e-6)


def test_26k_quirk_output_ignores_the_gemm():
    task = _load("26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply")
    x, y, w, b, iw, ib = task.make_inputs("ci", seed=1)
    f = jax.jit(task.reference)
    np.testing.assert_array_equal(np.asarray(f(x, y, w, b, iw, ib)), np.asarray(f(x * 3.0 + 1.0, y, -w, b + 1.0, iw, ib)))


def test_numpy_conv_transpose_matches_a_direct_scatter():
    """The test's own ConvTranspose helper against the per-element definition."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 3)), rng.standard_normal((2, 3, 4))
    want = np.zeros((1, 3, (3 - 1) * 2 + 4 - 2))
    for ci, co, i, kk in itertools.product(range(2), range(3), range(3), range(4)):
        o = 2 * i - 1 + kk
        if 0 <= o < want.shape[2]:
            want[0, co, o] += x[0, ci, i] * w[ci, co, kk]
    np.testing.assert_allclose(_conv_transpose(x, w, 2, 1), want, atol=1e-12)
