"""The float32 rule end to end (mk.harness.compare.compare_fair_f64): a tiled Pallas matmul on activation outliers
misses a 1e-3 tolerance purely from summation order (task 19k on tpu in evals/results/coverage.md); judged against
the reference recomputed in float64 it passes, with the rule stated in the verdict's flags. A subtly wrong kernel
(a 1e-5 relative bias, which the tolerance alone would pass nearly everywhere) still fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.harness import build_suite, evaluate
from mk.harness.compare import compare_outputs
from mk.harness.suite import ReferenceCache
from mk.task import ArgSpec, Scale, Task, Tolerance

HONEST = (Path(__file__).parent / "adversarial" / "control_pallas_matmul.py").read_text()
BIASED = HONEST.replace("o_ref[...] = acc_ref[...].astype(o_ref.dtype)", "o_ref[...] = (acc_ref[...] * 1.00001).astype(o_ref.dtype)")

pytestmark = pytest.mark.slow


_DOT = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))  # compiled once per block shape


def _tiled_like_the_control(x, w, block_k: int = 128):
    """The control kernel's order of summation on the host: one HIGHEST dot per K block, accumulated in float32."""
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for k in range(0, x.shape[1], block_k):
        acc = acc + np.asarray(_DOT(x[:, k:k + block_k], w[k:k + block_k]))
    return acc


@pytest.fixture(scope="module")
def judged():
    """The first outlier seed where the control's tiled sum misses the tolerance against XLA's dot on this host (by
    up to 0.6 % where large terms cancel). XLA's CPU dot sums K in a host-dependent order, so the seed is found here,
    not fixed: seed 1 missed it on the host this test was written on and is inside it (0.67 of the tolerance) on an
    AMD EPYC host, where seed 4 is the first to miss."""
    task = Task("mm_outliers", lambda x, w: jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST),
                (ArgSpec("x", (64, 2048), "float32"), ArgSpec("w", (2048, 128), "float32")), {"ci": Scale("ci")},
                tolerance=Tolerance(1e-3, 1e-3))
    task = dataclasses.replace(task, heldout=())  # sizes are not what this tests
    cache = ReferenceCache(task)
    for seed in range(1, 33):
        suite = build_suite(task, seeds=(seed,), distributions=("large_magnitude",))
        x, w = suite.inputs(task, suite.cases[0])
        if not compare_outputs(cache.compute("ci", [x, w]), [_tiled_like_the_control(x, w)], task.tolerance).ok:
            return task, suite
    pytest.fail("no outlier seed in 1..32 where a tiled float32 sum misses the tolerance: nothing to test the rule on")


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
