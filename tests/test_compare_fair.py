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
