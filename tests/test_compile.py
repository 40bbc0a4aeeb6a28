"""Prompt compilation (evals/compile.py) and loading compiled programs (mk.compiled), offline with a scripted LM."""

from __future__ import annotations

import json
import re

import dspy
import pytest
from lm_fakes import RoutedLM, fresh_dspy

from evals import compile as comp
from mk.compiled import load_compiled
from mk.programs import Implementer

TASK_ID = "jaxbench:12p_RMSNorm"
BETTER = "Normalise each row by its root mean square in float32 (IMPROVED-INSTRUCTION), then cast and scale."

CORRECT = '''
import jax
import jax.numpy as jnp


def kernel(x, scale, epsilon):
    xf = x.astype(jnp.float32)
    n = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + epsilon)
    return n.astype(jnp.bfloat16) * scale
'''
WRONG = "def kernel(x, scale, epsilon):\n    return x * scale\n"
BROKEN = "def kernel(x, scale, epsilon):\n    return undefined_helper(x)\n"
PLAN = {"approach": "jax", "strategy": "Compute the statistics in float32 in one fused expression.", "expected_speedup": 1.2}


def _route(lm, messages) -> str:
    """Answers by the output fields the prompt asks for: wrong code under the seed instruction, correct
    code once the instruction holds BETTER; a plan for the planner; BETTER in every field of any other
    signature (GEPA's reflection, MIPRO's proposals); a raw prompt gets BETTER in a code block."""
    outputs = messages[0]["content"].partition("Your output fields are:")[2].partition("All interactions")[0]
    wanted = re.findall(r"^\d+\. `(\w+)`", outputs, flags=re.M)
    lm.asked.append(",".join(wanted) or "reflection")
    if not wanted:
        return f"Here is the improved instruction:\n```\n{BETTER}\n```"
    if "code" in wanted:
        answer = {"code": CORRECT if "IMPROVED-INSTRUCTION" in messages[0]["content"] else WRONG, "config_space": {}}
    elif "plan" in wanted:
        answer = {"plan": PLAN}
    else:
        answer = {name: BETTER for name in wanted}
    if "JSON" in messages[0]["content"]:  # the JSONAdapter (GEPA's instruction proposer uses it)
        return json.dumps(answer)
    return lm._format_answer_fields(answer)


def ScriptedLM() -> RoutedLM:
    return RoutedLM(_route)


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    monkeypatch.delenv("MK_NO_COMPILED", raising=False)
    yield from fresh_dspy(monkeypatch)


@pytest.fixture(scope="module")
def examples():
    return comp.make_examples("implementer", [TASK_ID], target="cpu", scale="ci")


def metric():
    return comp.HarnessMetric(target="cpu", scale="ci", measure=False)


def test_split_is_deterministic_disjoint_and_per_id():
    ids = [f"jaxbench:{i}x_T" for i in range(50)]
    train, val = comp.split_tasks(ids)
    train_r, val_r = comp.split_tasks(list(reversed(ids)))
    assert (sorted(train), sorted(val)) == (sorted(train_r), sorted(val_r)) and set(train).isdisjoint(val)
    assert sorted(train + val) == sorted(ids) and 5 <= len(val) <= 25
    assert comp.split_tasks(ids[:10])[1] == [i for i in val if i in ids[:10]]  # each id decides alone


def test_examples_carry_the_inputs_and_the_task(examples):
    (ex,) = examples
    assert ex.task_id == TASK_ID and "12p_RMSNorm" in ex.task_analysis and ex.plan.approach == "pallas"
    assert set(ex.inputs().keys()) == {"task_id", "task_analysis", "plan", "hardware"}


def test_metric_scores_and_explains(examples):
    m, ex = metric(), examples[0]
    good = m(ex, dspy.Prediction(code=CORRECT, error=""))
    bad = m(ex, dspy.Prediction(code=WRONG, error=""))
    broken = m(ex, dspy.Prediction(code=BROKEN, error=""))
    empty = m(ex, dspy.Prediction(code="", error="the implementer sub-agent gave no valid answer"))
    assert good.score == comp.SCORE_CORRECT and "verdict: correct" in good.feedback
    assert bad.score == comp.SCORE_COMPILES and "verdict: incorrect" in bad.feedback and "worst case" in bad.feedback
    assert broken.score == 0.0 and "undefined_helper" in broken.feedback
    assert empty.score == 0.0 and "no valid answer" in empty.feedback
    assert m(ex, dspy.Prediction(code=CORRECT, error="")).score == good.score and m.calls == 3  # cached verdicts
    assert m.score(ex, dspy.Prediction(code=WRONG)) == pytest.approx(0.25)


def test_speedup_bonus_is_bounded():
    from mk.harness.results import EvalResult, StepResult, TimingResult

    def result(speedup):
        return EvalResult(status="correct", reason="ok", task="t", target="gpu", steps=[StepResult(name="compile", ok=True)],
                          timing=TimingResult(measured=True, speedup=speedup, candidate_median_s=1.0, reference_median_s=speedup))

    assert comp.score_result(result(0.5)) == 0.5 and comp.score_result(result(2.0)) == pytest.approx(1.0)
    assert comp.score_result(result(1.41421356)) == pytest.approx(0.75) and comp.score_result(result(50.0)) == 1.0


def test_gepa_compiles_saves_and_mk_loads_it(tmp_path, examples, monkeypatch):
    lm = ScriptedLM()
    m = metric()
    result = comp.compile_agent("implementer", "gepa", examples, valset=examples, metric=m, lm=lm, out=tmp_path,
                                max_metric_calls=4)
    assert "new_instruction" in lm.asked  # GEPA reflected on the harness feedback
    saved = json.loads((tmp_path / "implementer.json").read_text())
    assert saved["predict"]["signature"]["instructions"] == BETTER
    assert result.meta["val_scores"] == {TASK_ID: comp.SCORE_CORRECT} and result.meta["optimizer"] == "gepa"
    assert result.meta["fields"]["predict"][:2] == ["task_analysis", "plan"]

    fresh = Implementer()
    assert load_compiled("implementer", fresh, directory=tmp_path) == tmp_path / "implementer.json"
    assert fresh.predict.signature.instructions == BETTER
    monkeypatch.setenv("MK_NO_COMPILED", "1")
    assert load_compiled("implementer", Implementer(), directory=tmp_path) is None
    monkeypatch.delenv("MK_NO_COMPILED")
    monkeypatch.setenv("MK_PROGRAMS_DIR", str(tmp_path))
    assert load_compiled("implementer", Implementer()) is not None


def test_mipro_compiles_with_tiny_budgets(tmp_path, examples):
    lm = ScriptedLM()
    result = comp.compile_agent("implementer", "mipro", examples, valset=examples, metric=metric(), lm=lm, out=tmp_path,
                                num_candidates=2, num_trials=2)
    assert any("proposed_instruction" in a for a in lm.asked)
    assert (tmp_path / "implementer.json").is_file() and result.meta["optimizer"] == "mipro"
    # MIPRO picks the best of the seed and the proposed instruction by the harness score
    assert result.program.predict.signature.instructions == BETTER
    assert result.meta["val_scores"][TASK_ID] == comp.SCORE_CORRECT


def test_a_compiled_program_that_does_not_fit_is_skipped(tmp_path, caplog):
    from mk.programs import Planner

    Implementer().save(str(tmp_path / "planner.json"))  # the wrong agent's state under the planner's name
    planner = Planner()
    before = planner.predict.signature.instructions
    assert load_compiled("planner", planner, directory=tmp_path) is None
    assert planner.predict.signature.instructions == before and "signature fields" in caplog.text
    (tmp_path / "implementer.json").write_text("{not json")
    assert load_compiled("implementer", Implementer(), directory=tmp_path) is None and "unreadable" in caplog.text
    assert load_compiled("implementer", Implementer(), directory=tmp_path / "none") is None


def test_planner_student_plans_then_implements():
    lm = ScriptedLM()
    (ex,) = comp.make_examples("planner", [TASK_ID], target="cpu", scale="ci")
    student = comp.PlannerStudent(scale="ci")
    assert [n for n, _ in student.named_predictors()] == ["agent.predict"]  # only the planner is compiled
    with dspy.context(lm=lm):
        pred = student(**ex.inputs())
    assert pred.plan.strategy.startswith("Compute") and pred.code.strip().startswith("def kernel")
    judged = metric()(ex, pred, pred_name="agent.predict")
    assert judged.score == comp.SCORE_COMPILES and judged.feedback.startswith("plan: jax:")
