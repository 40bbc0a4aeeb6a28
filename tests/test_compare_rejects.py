"""A tolerance must be able to reject: outputs far smaller than the task's atol are judged relative to their scale."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mk.harness.compare import MUTATION, compare_fair, compare_outputs, rejecting_tolerance
from mk.task import Tolerance

LOOSE = Tolerance(1e-2, 1e-2)


def _small(seed: int = 0, scale: float = 1e-3) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal((32, 128))).astype(np.float32)


@pytest.mark.parametrize("mutant", [lambda r: MUTATION * r, lambda r: 0.0 * r, lambda r: 1.3 * r, lambda r: -r],
                         ids=["scaled-0.9", "zeros", "scaled-1.3", "negated"])
def test_standard_mutations_of_a_small_output_are_rejected(mutant):
    ref = _small()
    got = compare_outputs([ref], [mutant(ref).astype(np.float32)], LOOSE)
    assert not got.ok and got.notes and "cannot reject the reference scaled by 0.9" in got.notes[0]


def test_an_honest_small_output_still_passes_and_says_how_it_was_judged():
    ref = _small()
    near = (ref * (1 + 1e-3 * np.random.default_rng(1).standard_normal(ref.shape))).astype(np.float32)
    got = compare_outputs([ref], [near], LOOSE)
    assert got.ok and len(got.notes) == 1


def test_a_tolerance_that_rejects_is_kept():
    ref = _small(scale=1.0)
    assert rejecting_tolerance(ref, 1e-2, 1e-2) == (1e-2, 1e-2, "")
    assert not compare_outputs([ref], [MUTATION * ref], LOOSE).ok
    assert rejecting_tolerance(np.zeros((4, 4), np.float32), 1e-2, 1e-2)[2] == ""  # nothing to tell apart
    assert rejecting_tolerance(np.arange(8, dtype=np.int32), 1e-2, 1e-2)[2] == ""  # integers compare exactly anyway


def test_a_huge_rtol_is_tightened_too():
    ref = _small(scale=1.0)
    atol, rtol, note = rejecting_tolerance(ref, 0.0, 0.5)
    assert note and rtol < 1 - MUTATION and not compare_outputs([ref], [MUTATION * ref], Tolerance(0.0, 0.5)).ok


def test_the_low_precision_rule_judges_at_the_tightened_tolerance():
    bf16 = np.dtype(ml_dtypes.bfloat16)
    truth = _small()
    ref = truth.astype(bf16)
    got = compare_fair([ref], [truth], [(MUTATION * truth).astype(bf16)], LOOSE)
    assert not got.ok and got.notes
