"""The row-wise template's two strategies: whole rows per block, and a two-pass row reduction for long rows (one
kernel: statistics over column blocks, then the normalised blocks), each with its own name and plan text, each
judged correct on examples/rmsnorm and examples/softmax (TPU, interpret mode; ci scale with its held-out and fresh
sizes)."""

from __future__ import annotations

import pytest

from mk.author import OfflineAuthor
from mk.harness.evaluate import evaluate
from mk.loaders import load_task

pytestmark = pytest.mark.slow


def _ci(spec):
    t = load_task(spec)
    return t.with_scales({"ci": t.scales["ci"]})


@pytest.mark.parametrize("example", ["examples/rmsnorm.py", "examples/softmax.py"])
def test_two_variants_with_their_own_names_and_plans(example):
    props = [p for p in OfflineAuthor().propose(_ci(example), "tpu").proposals if p.template == "rowwise"]
    assert [p.name for p in props] == ["rowwise-tpu", "rowwise-two-pass-tpu"]
    assert "whole rows" in props[0].rationale and "two-pass" in props[1].rationale
    assert "rowwise_two_pass" in props[1].source and "lax.fori_loop" not in props[1].source


def test_no_two_pass_variant_for_another_row_computation():
    from mk.task import ArgSpec, Init, Scale, Task, Tolerance
    import jax.numpy as jnp

    task = Task(name="rowmax_shift", reference=lambda x: x - jnp.max(x, axis=-1, keepdims=True),
                args=(ArgSpec("x", ("r", "c"), "float32", Init("normal")),), tolerance=Tolerance(1e-5, 1e-5),
                scales={"ci": Scale("ci", dims={"r": 64, "c": 256})}, default_scale="ci")
    props = [p for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "rowwise"]
    assert [p.name for p in props] == ["rowwise-tpu"]


@pytest.mark.parametrize("example", ["examples/rmsnorm.py", "examples/softmax.py"])
def test_two_pass_variant_is_judged_correct(example):
    task = load_task(example)
    props = OfflineAuthor().propose(_ci(example), "tpu").proposals
    src = next(p.source for p in props if p.name == "rowwise-two-pass-tpu")
    res = evaluate(task, src, target="tpu", scale="ci", measure=False)
    assert res.status == "correct", res.reason
