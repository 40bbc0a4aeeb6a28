"""Verified means general: the kernel mk writes for each example, judged on a copy of its task with other
dimensions (and, for rmsnorm, another static value), is ``correct`` inside its envelope and refuses with the
envelope error outside it — never ``incorrect``."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from mk.harness import build_suite, evaluate
from mk.harness.envelope import OUTSIDE, Envelope
from mk.job import optimize_task
from mk.loaders import load_task
from mk.task import Scale

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.slow


def _dim_rules(task, env: Envelope) -> dict[str, object]:
    """Each named dim of the task -> the envelope's rule for the first axis that uses it."""
    rules = {}
    for i, arg in enumerate(task.args):
        for j, d in enumerate(arg.shape):
            if isinstance(d, str) and d not in rules:
                rules[d] = env.axes[i][j]
    return rules


def _inside(rule) -> int:
    """A size the envelope allows that neither the author nor the frozen suite used."""
    if rule.kind == "multiple":
        return next(v for v in range(min(rule.values), rule.top + 1, rule.unit) if v not in rule.values)
    return rule.values[0]


@pytest.mark.parametrize("example,target", [("rmsnorm", "tpu"), ("softmax", "tpu"), ("matmul_gelu", "tpu"),
                                            ("attention", "tpu"), ("rmsnorm", "gpu")])
def test_written_kernel_is_general_or_refuses(tmp_path, example, target):
    full = load_task(EXAMPLES / f"{example}.py")
    task = full.with_scales({"ci": full.scale("ci")})
    report = optimize_task(task, target=target, lm="offline", db=tmp_path / "db.duckdb", out=tmp_path / "out",
                           iterations=1, tune=False)
    assert report.status == "correct", report.stop_reason
    env = Envelope.from_dict(report.envelope)
    kernel = Path(report.kernel_path)
    text = kernel.read_text()
    assert "# envelope" in text and "heldout" in env.heldout
    header = list(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines()))
    assert len(header) > 5 and all(len(line) <= 100 for line in header), header  # issue 24, item 5: at most 100 wide
    # the header's suite hash is the one `mk eval` rebuilds (the reproduce line names the scale)
    assert build_suite(task).hash == report.suite_hash and "--scale ci" in text and report.suite_hash in text
    rules = _dim_rules(task, env)
    varied = [d for d, r in rules.items() if r.kind == "multiple"]
    assert varied, f"the held-out scale varied no dim of {example}: {rules}"

    ci = task.scale("ci")
    dims = {d: _inside(rules[d]) if d in rules else v for d, v in ci.dims.items()}
    static = {s.name: 0.05 for s in env.static if s.kind == "range"}  # eps: a value neither the author nor the suite used
    assert example != "rmsnorm" or static, "rmsnorm's eps must be a static the suite varied"
    # judged there only (no held-out sizes of its own, which could lie beyond the envelope and be refused)
    inside = dataclasses.replace(task.with_scales({"other": Scale("other", dims=dims, static=static)}), heldout=())
    assert env.check(inside.shapes("other"), [a.dtype for a in task.args], static) is None
    # plain and uniform inputs: with activation outliers a tiled f32 matmul's summation order alone can move one value
    # past a 1e-3 tolerance at a new K (tracked separately, see the issue notes); generality is what is tested here
    suite = build_suite(inside, distributions=("native", "normal", "uniform"))
    verdict = evaluate(inside, kernel, target=target, suite=suite, measure=False)
    assert verdict.status == "correct", verdict.reason

    d = next(d for d in varied if rules[d].unit > 1)
    odd = dict(ci.dims, **{d: min(rules[d].values) + rules[d].unit // 2})  # not a multiple of the verified unit
    outside = task.with_scales({"odd": Scale("odd", dims=odd)})
    try:
        outside.output_structs("odd")
    except Exception:  # noqa: BLE001 - the reference itself refuses that size: nothing to judge there
        pytest.skip(f"the reference of {example} refuses {d}={odd[d]}")
    verdict = evaluate(outside, kernel, target=target, measure=False)
    assert verdict.status == "outside_envelope" and OUTSIDE in verdict.reason, verdict.reason
