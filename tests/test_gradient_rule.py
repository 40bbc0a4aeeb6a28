"""The judge's yardstick rules for gradients (mk.harness.gradient.fair): an honest float32 backward whose summation
order differs from the reference's passes against the float64 VJP; a biased, bf16-rounded or term-dropping one
does not, even where the reference's own float32 error is the yardstick."""

import jax
import jax.numpy as jnp
import numpy as np

from mk.harness.compare import F32_MAX_FACTOR, F32_RMS_FACTOR
from mk.harness.gradient import LOW_FACTORS, fair


def F32(own, truth, got):
    return fair(own, truth, got, (F32_MAX_FACTOR, F32_RMS_FACTOR), "float32", "float64")


def _case(seed=0, t=64, h=256):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((t, h)) * 1e3).astype(np.float32)  # activation outliers: large terms that cancel
    w = rng.standard_normal((h, h)).astype(np.float32)
    ct = rng.standard_normal((t, h)).astype(np.float32)
    return x, w, ct


def _dw(x, ct, dtype):
    """The reference's dW = x^T @ ct, in ``dtype``."""
    with jax.enable_x64(dtype == np.float64):
        return np.asarray(jnp.dot(jnp.asarray(x, dtype).T, jnp.asarray(ct, dtype), precision="highest"))


def _tiled_dw(x, ct, block=8):
    """An honest float32 backward: dW accumulated over token blocks (another summation order)."""
    acc = np.zeros((x.shape[1], ct.shape[1]), np.float32)
    for lo in range(0, x.shape[0], block):
        acc = acc + np.asarray(jnp.dot(jnp.asarray(x[lo:lo + block]).T, jnp.asarray(ct[lo:lo + block]),
                                       precision="highest"))
    return acc


def test_an_honest_reordered_float32_backward_passes():
    x, _, ct = _case()
    ref32, ref64 = _dw(x, ct, np.float32), _dw(x, ct, np.float64)
    ok, words = F32([ref32], [ref64], [_tiled_dw(x, ct)])
    assert ok, words
    assert "vs own" in words


def test_a_bf16_rounded_backward_fails():
    x, _, ct = _case(1)
    ref32, ref64 = _dw(x, ct, np.float32), _dw(x, ct, np.float64)
    bf = np.asarray(jnp.asarray(ref32).astype(jnp.bfloat16).astype(jnp.float32))
    ok, words = F32([ref32], [ref64], [bf])
    assert not ok and "exceeds" in words


def test_a_relative_bias_fails():
    x, _, ct = _case(2)
    ref32, ref64 = _dw(x, ct, np.float32), _dw(x, ct, np.float64)
    ok, words = F32([ref32], [ref64], [ref32 * np.float32(1 + 1e-4)])
    assert not ok and "float32 VJP's own" in words


def test_a_dropped_token_block_fails():
    x, _, ct = _case(3)
    ref32, ref64 = _dw(x, ct, np.float32), _dw(x, ct, np.float64)
    ok, _ = F32([ref32], [ref64], [_dw(x[:-8], ct[:-8], np.float32)])
    assert not ok


def test_a_nan_where_the_float64_vjp_is_finite_fails():
    x, _, ct = _case(4)
    ref32, ref64 = _dw(x, ct, np.float32), _dw(x, ct, np.float64)
    got = ref32.copy()
    got[0, 0] = np.nan
    assert not F32([ref32], [ref64], [got])[0]


def test_without_a_higher_precision_truth_the_rule_does_not_apply():
    x, _, ct = _case(5)
    ref32, ref64 = _dw(x, ct, np.float32), _dw(x, ct, np.float64)
    assert F32([ref32], [ref64.astype(np.float16)], [ref32]) == (False, "")


def _bf16(a):
    return np.asarray(jnp.asarray(a).astype(jnp.bfloat16))


def test_low_precision_an_f32_accumulating_backward_passes_and_a_zeroed_or_halved_one_does_not():
    """16-bit inputs: the truth is the VJP run in float32, the yardstick the bf16 VJP's own error."""
    x, _, ct = _case(6)
    xb, cb = _bf16(x), _bf16(ct)
    truth = np.asarray(jnp.dot(jnp.asarray(xb, jnp.float32).T, jnp.asarray(cb, jnp.float32), precision="highest"))
    own = np.asarray(jnp.dot(jnp.asarray(xb).T, jnp.asarray(cb)))  # the bf16 reference (a bf16 result)
    honest = _bf16(truth)  # f32 accumulation, rounded once to bf16
    ok, words = fair([own], [truth], [honest], LOW_FACTORS, "16-bit", "float32")
    assert ok, words
    for wrong in (np.zeros_like(own), _bf16(truth * 0.5), _bf16(truth * 1.02)):
        ok, words = fair([own], [truth], [wrong], LOW_FACTORS, "16-bit", "float32")
        assert not ok and words


def test_reference_vjp_flops_is_exported_once_per_task_and_size(monkeypatch):
    """The backward's work check counts the reference VJP's FLOPs; a judge process judging many candidates (a
    search) exports it once per task and size, and a different size is counted anew."""
    from pathlib import Path

    from mk.harness import gradient
    from mk.loaders import load_task

    task = load_task(str(Path(__file__).parents[1] / "examples" / "rmsnorm.py"))
    calls = []
    real = gradient._reference_vjp_flops
    monkeypatch.setattr(gradient, "_VJP_FLOPS", {})
    monkeypatch.setattr(gradient, "_reference_vjp_flops", lambda t, s: calls.append(s) or real(t, s))
    first = gradient.reference_vjp_flops(task, "ci")
    assert first and first > 0
    assert gradient.reference_vjp_flops(task, "ci") == first and calls == ["ci"]
    assert gradient.reference_vjp_flops(task, "full") > first and calls == ["ci", "full"]
