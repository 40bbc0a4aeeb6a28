"""`mk optimize` / mk.job.optimize_task with a language-model author (a scripted DSPy LM), and run budgets."""

from __future__ import annotations

import json

import pytest

import mk.lm
from mk.cli import main
from mk.harness import evaluate
from mk.candidate import load_candidate
from mk.job import optimize_task
from mk.loaders import load_task
from mk.store import Store

from lm_fakes import EXAMPLES, fresh_dspy, script

RMSNORM = str(EXAMPLES / "rmsnorm.py")


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)



def test_optimize_task_with_an_lm_object(tmp_path):
    task = load_task(RMSNORM)
    task = task.with_scales({"ci": task.scale("ci")})
    events = []
    report = optimize_task(task, target="cpu", lm=script(), iterations=3, db=tmp_path / "db.duckdb", out=tmp_path / "out",
                           tune=False, on_event=lambda k, d: events.append((k, d)))
    assert report.status == "correct", report.stop_reason
    assert report.author == "lm:dummy" and "dummy" in events[0][1]["announcement"]
    assert len(report.iterations) == 1 and "no further proposals" in report.stop_reason
    # the written kernel (provenance header included) is what the judge accepts
    res = evaluate(task, load_candidate(report.kernel_path), target="cpu", measure=False)
    assert res.status == "correct", res.reason
    with Store.open(tmp_path / "db.duckdb", read_only=True) as store:
        agents = [r["agent"] for r in store.query("select agent from lm_calls where run_id = ? order by created_at",
                                                   [report.run_id])]
        assert agents == ["test_synthesizer", "planner", "implementer", "profile_analyst"]
        suite = store.get_suite(report.suite_hash)
        assert "syn_ragged-s0-normal" in str(suite["cases"])  # the synthesized case is in the frozen suite
        assert store.get_run(report.run_id)["status"] == "correct"


@pytest.fixture
def scripted_cli(monkeypatch):
    """`--lm scripted/<anything>` resolves to the scripted LM (the CLI otherwise asks DSPy for a provider)."""
    real = mk.lm.resolve_lm

    def resolve(lm=None, **kw):
        if isinstance(lm, str) and lm.startswith("scripted/"):
            return mk.lm.LMChoice("explicit", script(), lm, "--lm names the scripted test model")
        return real(lm, **kw)

    monkeypatch.setattr(mk.lm, "resolve_lm", resolve)


def test_cli_call_budget_stops_the_run(tmp_path, capsys, scripted_cli):
    rc = main(["optimize", RMSNORM, "--lm", "scripted/x", "--target", "cpu", "--scale", "ci", "--budget-calls", "1",
               "--db", str(tmp_path / "db.duckdb"), "--out", str(tmp_path / "out"), "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and out["status"] == "no_correct_candidate" and out["kernel_path"] is None
    assert "budget spent" in out["stop_reason"] and "1 of 1 calls" in out["stop_reason"]
    with Store.open(tmp_path / "db.duckdb", read_only=True) as store:
        rows = store.query("select agent from lm_calls where run_id = ?", [out["run_id"]])
    assert [r["agent"] for r in rows] == ["test_synthesizer"]  # the one call allowed, then Auto stopped


def test_cli_time_budget_with_the_offline_author(tmp_path, capsys):
    rc = main(["optimize", RMSNORM, "--lm", "offline", "--target", "cpu", "--scale", "ci", "--budget-time", "0",
               "--db", str(tmp_path / "db.duckdb"), "--out", str(tmp_path / "out"), "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and "wall-time budget" in out["stop_reason"]


def test_a_persistent_rate_limit_ends_the_run_failed_with_the_best_kernel_written(tmp_path):
    """The model answers the first iteration (a correct kernel, then 'continue'), then rate-limits for good."""
    from dspy.utils.exceptions import LMRateLimitError

    from lm_fakes import CONTINUE

    lm = script(analysis=[{"analysis": CONTINUE}])
    engine = lm._engine_spec
    plain = type(engine)._complete_messages
    plans = []

    def limited(self, messages):
        if "`[[ ## plan ## ]]`" in messages[-1]["content"]:
            plans.append(1)
            if len(plans) > 1:
                raise LMRateLimitError("429 RESOURCE_EXHAUSTED: quota exceeded (after 3 retries)")
        return plain(self, messages)

    engine._complete_messages = limited.__get__(engine)
    task = load_task(RMSNORM)
    task = task.with_scales({"ci": task.scale("ci")})
    report = optimize_task(task, target="cpu", lm=lm, iterations=3, db=tmp_path / "db.duckdb", out=tmp_path / "out", tune=False)
    assert report.status == "failed" and "the language model failed in the plan phase" in report.stop_reason
    assert "LMRateLimitError" in report.stop_reason and "best kernel so far is kept" in report.stop_reason
    assert report.kernel_path and evaluate(task, load_candidate(report.kernel_path), target="cpu", measure=False).ok
    with Store.open(tmp_path / "db.duckdb", read_only=True) as store:
        run = store.get_run(report.run_id)
    assert run["status"] == "failed" and "429" in run["reason"]


def test_a_rate_limit_while_tests_are_synthesised_fails_the_run_cleanly(tmp_path):
    """The suite is frozen (the author's test synthesis) before Auto's first step: a provider that keeps failing there
    marks the run failed with the reason and a typed error names the resume command; the run is never left running."""
    from dspy.utils.exceptions import LMRateLimitError

    from mk.errors import ModelFailed

    lm = script()
    engine = lm._engine_spec
    plain = type(engine)._complete_messages

    def limited(self, messages):
        if "[[ ## test_cases ## ]]" in messages[-1]["content"] or "[[ ## cases ## ]]" in messages[-1]["content"]:
            raise LMRateLimitError("429 RESOURCE_EXHAUSTED: quota exceeded (after 3 retries)")
        return plain(self, messages)

    engine._complete_messages = limited.__get__(engine)
    task = load_task(RMSNORM)
    task = task.with_scales({"ci": task.scale("ci")})
    with pytest.raises(ModelFailed) as info:
        optimize_task(task, target="cpu", lm=lm, iterations=2, db=tmp_path / "db.duckdb", out=tmp_path / "out", tune=False)
    assert "mk resume " in str(info.value) and "LMRateLimitError" in str(info.value)
    with Store.open(tmp_path / "db.duckdb", read_only=True) as store:
        (run,) = store.list_runs()
    assert run["status"] == "failed" and "429" in run["reason"]
