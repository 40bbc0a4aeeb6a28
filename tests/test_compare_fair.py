"""The low-precision rule: a candidate closer to the float32 truth than a bf16 reference is not failed for it."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from mk.harness.compare import compare_fair, compare_outputs, compare_one
from mk.task import Tolerance

BF16 = np.dtype(ml_dtypes.bfloat16)


def _case(seed: int = 0):
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal((64, 128)).astype(np.float32)
    reference = (truth + 0.03 * rng.standard_normal(truth.shape)).astype(BF16)  # a bf16 pipeline's accumulated rounding
    return truth, reference


def test_a_more_accurate_candidate_passes_by_the_rule():
    truth, reference = _case()
    tol = Tolerance(1e-3, 1e-3)
    candidate = truth.astype(BF16)
    assert not compare_outputs([reference], [candidate], tol).ok
    got = compare_fair([reference], [truth], [candidate], tol)
    assert got.ok and "low-precision rule" in got.reason


def test_a_less_accurate_candidate_still_fails_and_says_why():
    truth, reference = _case()
    rng = np.random.default_rng(1)
    candidate = (truth + 0.2 * rng.standard_normal(truth.shape)).astype(BF16)
    got = compare_fair([reference], [truth], [candidate], Tolerance(1e-3, 1e-3))
    assert not got.ok and "exceeds the bfloat16 reference's own" in got.reason


def _cancelling(seed: int):
    """A bf16 output near 60,000 (a step of 256) that the reference gets within its own rounding."""
    rng = np.random.default_rng(seed)
    truth = (6e4 + 300 * rng.standard_normal((32, 64))).astype(np.float32)
    return truth, truth.astype(BF16)


def test_one_rounding_step_more_than_the_reference_passes():
    """An honest kernel summing in another order rounds a value near a midpoint to the neighbouring bf16 number: at
    most one step off where the reference is half a step off (set 3's LLaMA MLP on gpu: 234 against the reference's
    own 231, a step being 256). Half a step of the output's dtype at its largest value is allowed on top."""
    truth, reference = _cancelling(0)
    nudged = truth + np.where(np.arange(truth.size).reshape(truth.shape) % 7 == 0, 60.0, 0.0).astype(np.float32)
    candidate = nudged.astype(BF16)  # its float32 sum differs by 60 on some elements, then rounds correctly
    own = np.abs(reference.astype(np.float64) - truth).max()
    mine = np.abs(candidate.astype(np.float64) - truth).max()
    assert mine > own * 1.01 + 0.02  # the rule without the half step refused it
    assert compare_fair([reference], [truth], [candidate], Tolerance(2e-2, 1e-6)).ok


def test_a_bias_of_a_whole_step_still_fails():
    truth, reference = _cancelling(1)
    candidate = (truth + 256.0).astype(BF16)  # every value one step high
    got = compare_fair([reference], [truth], [candidate], Tolerance(2e-2, 1e-6))
    assert not got.ok and "half a bfloat16 step" in got.reason


def test_float32_outputs_never_use_the_rule():
    truth, _ = _case()
    reference = truth + 0.01
    got = compare_fair([reference], [truth], [truth], Tolerance(1e-4, 1e-4))
    assert not got.ok and "low-precision" not in got.reason


def test_chunked_comparison_matches_on_large_arrays():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal(9_000_001).astype(np.float32)
    cand = ref.copy()
    cand[8_999_999] += 1.0
    got = compare_one(ref, cand, 1e-5, 1e-5)
    assert not got.ok and got.reason.startswith("1 of 9000001 values outside") and abs(got.max_abs - 1.0) < 1e-6
    assert compare_one(ref, ref.copy(), 1e-5, 1e-5).ok


# --- the float32 rule: a float32 reference against itself in float64 -------------------------------------------------
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from mk.harness.compare import F32_MAX_FACTOR, compare_fair_f64  # noqa: E402
from mk.task import ArgSpec, Scale, Task  # noqa: E402

K = 2048


def _matmul_case(seed: int = 2):
    """A float32 matmul on the suite's activation-outlier inputs: the XLA reference (HIGHEST), the float64 result,
    and the operands (a tiled f32 accumulation misses a 1e-3 tolerance here purely from summation order)."""
    task = Task("mm", lambda x, w: jnp.dot(x, w, precision="highest"),
                (ArgSpec("x", (64, K), "float32"), ArgSpec("w", (K, 128), "float32")), {"ci": Scale("ci")})
    x, w = (np.asarray(a) for a in task.make_inputs("ci", seed, "large_magnitude"))
    reference = np.asarray(jax.jit(lambda a, b: jnp.dot(a, b, precision="highest"))(x, w))
    return x, w, reference, x.astype(np.float64) @ w.astype(np.float64)


def _tiled(x, w, block=128):
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for k in range(0, x.shape[1], block):
        acc = acc + (x[:, k:k + block] @ w[k:k + block]).astype(np.float32)
    return acc


def _sequential(x, w):
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for k in range(x.shape[1]):
        acc = acc + x[:, k:k + 1] * w[k:k + 1]
    return acc


TOL = Tolerance(1e-3, 1e-3)


def test_a_reordered_summation_passes_by_the_float32_rule():
    """Every reordering the tolerance alone refuses passes by the rule. Which orders the tolerance refuses depends on
    the host: XLA's CPU dot sums K in an order of its own (on some x86 hosts exactly the sequential order), so a
    candidate that happens to sum as the reference does matches it outright and is not a case of the rule."""
    x, w, reference, truth = _matmul_case()
    refused = 0
    for candidate in (_tiled(x, w), _sequential(x, w), _sequential(x[:, ::-1], w[::-1]), _tiled(x, w, block=512)):
        if compare_outputs([reference], [candidate], TOL).ok:
            continue
        refused += 1
        got = compare_fair_f64([reference], [truth], [candidate], TOL)
        assert got.ok and "float32 rule" in got.reason, got.reason
    assert refused >= 2, "the tolerance refused fewer than two of the four summation orders: the case tests nothing"


def test_subtly_wrong_float32_kernels_still_fail_the_float32_rule():
    x, w, reference, truth = _matmul_case()
    bf = np.dtype(ml_dtypes.bfloat16)
    wrong = {
        "bf16 operands (one MXU pass)": x.astype(bf).astype(np.float32) @ w.astype(bf).astype(np.float32),
        "one K term dropped": _tiled(x[:, :-1], w[:-1]),
        "relative bias 1e-5": (truth * (1 + 1e-5)).astype(np.float32),
        "one value off by 20x the reference's own worst error": None,
    }
    own = float(np.abs(reference.astype(np.float64) - truth).max())
    off = _tiled(x, w)
    off[3, 5] += 20 * own
    wrong["one value off by 20x the reference's own worst error"] = off
    for name, candidate in wrong.items():
        candidate = np.asarray(candidate, np.float32)
        assert not compare_outputs([reference], [candidate], TOL).ok, name
        got = compare_fair_f64([reference], [truth], [candidate], TOL)
        assert not got.ok and "exceeds" in got.reason and "float64" in got.reason, (name, got.reason)


def test_the_float32_rule_keeps_the_other_checks():
    x, w, reference, truth = _matmul_case()
    candidate = _tiled(x, w)
    nan = candidate.copy()
    nan[0, 0] = np.nan
    assert not compare_fair_f64([reference], [truth], [nan], TOL).ok  # NaN where the reference is finite
    assert not compare_fair_f64([reference], [truth.astype(np.float32)], [candidate], TOL).ok  # a yardstick not in f64
    bf = np.dtype(ml_dtypes.bfloat16)
    assert not compare_fair_f64([reference.astype(bf)], [truth], [candidate.astype(bf)], TOL).ok  # bf16: the other rule
    assert F32_MAX_FACTOR >= 4  # honest reorderings measured up to 3.6x (see mk.harness.compare)


def test_a_huge_exact_fill_excuses_nothing_elsewhere():
    """Stop 39's red team: with the half step taken at the output's largest value, a bf16 ``finfo.min`` fill (exact,
    so the reference's own error stays tiny) made the step 6.6e35, and zeros where the scores are, a dropped scale or
    noise passed. The step is now each value's own."""
    rng = np.random.default_rng(0)
    s = (rng.standard_normal((64, 64)) * 4).astype(np.float32)
    causal = np.tril(np.ones((64, 64), bool))
    fill = float(ml_dtypes.finfo(BF16).min)
    truth = np.where(causal, s, fill).astype(np.float32)
    reference = truth.astype(BF16)
    for wrong in (np.where(causal, 0.0, fill), np.where(causal, s * 8, fill)):
        assert not compare_fair([reference], [truth], [wrong.astype(BF16)], Tolerance(2e-2, 2e-2)).ok


def test_small_values_get_no_room_from_the_large_ones():
    truth, reference = _cancelling(2)
    truth[:, :32] = truth[:, :32] / 300  # values near 200 beside values near 60,000 (own error about 128)
    reference = truth.astype(BF16)
    wrong = truth.copy()
    wrong[:, :32] = 0.0  # the small half dropped: within half a step of the large values, not of their own
    assert not compare_fair([reference], [truth], [wrong.astype(BF16)], Tolerance(2e-2, 1e-6)).ok
