"""The float32 rule end to end (mk.harness.compare.compare_fair_f64): a tiled Pallas matmul on activation outliers
misses a 1e-3 tolerance purely from summation order (task 19k on tpu in evals/results/coverage.md); judged against
the reference recomputed in float64 it passes, with the rule stated in the verdict's flags. A subtly wrong kernel
(a 1e-5 relative bias, which the tolerance alone would pass nearly everywhere) still fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from mk.harness import build_suite, evaluate
from mk.task import ArgSpec, Scale, Task, Tolerance

HONEST = (Path(__file__).parent / "adversarial" / "control_pallas_matmul.py").read_text()
BIASED = HONEST.replace("o_ref[...] = acc_ref[...].astype(o_ref.dtype)", "o_ref[...] = (acc_ref[...] * 1.00001).astype(o_ref.dtype)")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def judged():
    task = Task("mm_outliers", lambda x, w: jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST),
                (ArgSpec("x", (64, 2048), "float32"), ArgSpec("w", (2048, 128), "float32")), {"ci": Scale("ci")},
                tolerance=Tolerance(1e-3, 1e-3))
    task = dataclasses.replace(task, heldout=())  # sizes are not what this tests
    # seed 1 of the outlier inputs: the tiled sum differs from XLA's by up to 0.6 % (rtol 1e-3) where large terms cancel
    return task, build_suite(task, seeds=(1,), distributions=("large_magnitude",))


def test_a_tiled_matmul_on_outliers_passes_by_the_float32_rule(judged):
    task, suite = judged
    res = evaluate(task, HONEST, target="tpu", suite=suite, measure=False)
    assert res.status == "correct", res.reason
    flags = [f for f in res.flags if "float32 rule" in f]
    assert any("large_magnitude" in f and "computed in float64" in f for f in flags), res.flags


def test_a_biased_matmul_fails_it(judged):
    assert BIASED != HONEST
    task, suite = judged
    res = evaluate(task, BIASED, target="tpu", suite=suite, measure=False)
    assert res.status == "incorrect" and "against the reference computed in float64" in res.reason, res.reason
