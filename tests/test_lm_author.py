"""LMAuthor: the DSPy sub-agents driving Auto, offline with a scripted LM (one queue of answers per sub-agent)."""

from __future__ import annotations

import copy
import logging

import dspy
import numpy as np
import pytest
from dspy.clients.cache import Cache
from dspy.dsp.utils.settings import DEFAULT_CONFIG
from lm_fakes import BROKEN, CONTINUE, EXAMPLES, KERNEL, PLAN, STOP, FakeKnowledge, ScriptedLM, fresh_dspy, script

from mk.author import ANNOUNCEMENT
from mk.author.adapter import OfflineAuthorAdapter
from mk.authors import LazyKnowledge, prepare_suite, resolve_author
from mk.budget import Budget, BudgetMeter
from mk.candidate import Candidate
from mk.errors import ConfigError
from mk.harness import evaluate
from mk.lm import Accountant, accounted
from mk.loaders import load_task
from mk.programs.auto import Auto, Context, Plan, Snapshot
from mk.programs.lm_author import LMAuthor, hardware_brief, plan_name, synthesize_cases, task_brief
from mk.store import Store

@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)


@pytest.fixture(scope="module")
def task():
    t = load_task(str(EXAMPLES / "rmsnorm.py"))
    return t.with_scales({"ci": t.scale("ci")})


def test_auto_with_lm_author_end_to_end(tmp_path, task):
    lm = script(code=[{"code": BROKEN, "config_space": {}}])
    kb = FakeKnowledge()
    with Store.open(tmp_path / "db.duckdb") as store:
        meter = BudgetMeter(Budget(max_lm_calls=20))
        author = LMAuthor(accounted(lm, Accountant(store, budget=meter)), knowledge=kb, synthesize_tests=False)
        auto = Auto(author, target="cpu", iterations=3, store=store, tune=False, budget=meter)
        traj = auto.start(task)
        author.bind_run(traj.run_id)
        while not traj.done:
            auto.step(traj)
        best = traj.best
        assert best is not None and best.correct, [s.summary() for s in traj.snapshots]
        assert len(traj.snapshots) == 1 and "no further proposals" in traj.stop_reason
        assert "analyst decided to stop" in author.stop_reason
        assert "(fixed:" in best.rationale and "memory-bound" in best.feedback
        # the kernel Auto kept is what the judge accepts on its own
        res = evaluate(task, Candidate.from_source(best.source), target="cpu", measure=False)
        assert res.status == "correct", res.reason
        rows = store.query("select agent, node_id from lm_calls where run_id = ? order by created_at", [traj.run_id])
        assert [r["agent"] for r in rows] == ["planner", "implementer", "compile_fixer", "profile_analyst"]
        assert meter.usage().lm_calls == 4
    assert lm.asked == ["plan", "code", "fixed_code", "analysis"]
    assert "dot_general requires contracting dimensions" in kb.queries[2]  # passages retrieved for the error


def test_a_call_budget_of_one_stops_the_run(tmp_path, task):
    lm = script()
    with Store.open(tmp_path / "db.duckdb") as store:
        author, _ = resolve_author(lm, store=store, budget=BudgetMeter(Budget(max_lm_calls=1)), knowledge=FakeKnowledge())
        author.synthesize_tests = False  # the one call allowed is the planner's
        auto = Auto(author, target="cpu", iterations=3, store=store, tune=False, budget=author.meter)
        traj = auto.start(task)
        author.bind_run(traj.run_id)
        while not traj.done:
            auto.step(traj)
        assert traj.stop_reason.startswith("budget spent") and "LM-call budget" in traj.stop_reason
        assert traj.best is None and traj.snapshots == []
        rows = store.query("select agent from lm_calls where run_id = ?", [traj.run_id])
        assert [r["agent"] for r in rows] == ["planner"]
        assert "budget spent" in store.get_run(traj.run_id)["reason"]


def test_plan_sees_feedback_history_passages_and_hardware(task):
    lm = script(plan=[{"plan": PLAN}])
    kb = FakeKnowledge()
    author = LMAuthor(accounted(lm, Accountant()), knowledge=kb, seeds=False)
    snap = Snapshot(1, "lm-jax-1", "r", KERNEL, {}, "incorrect", "case 3 max abs error 0.5", None, None,
                    failed_phase="test", feedback="memory-bound: HBM at 40%")
    ctx = Context(task, "tpu", [snap], snap.summary())
    plan = author.plan(ctx)
    assert plan.name == plan_name(plan.data) and plan.name.startswith("jax-compute-mean-squares-f32-")  # named by content
    assert plan.data.approach == "jax" and "fused pass" in plan.text
    prompt = lm.history[-1]["messages"][-1]["content"]
    for expected in ("case 3 max abs error 0.5", "HBM at 40%", "Pallas handbook", "VMEM", "rmsnorm", "Roofline floor"):
        assert expected in prompt, expected
    assert author.accountant.calls[0].agent == "planner"


def test_seeds_come_first_and_analyst_stop_ends_planning(task):
    lm = script(analysis=[{"analysis": CONTINUE}, {"analysis": STOP}])
    author = LMAuthor(accounted(lm, Accountant()), knowledge=None)
    ctx = Context(task, "tpu", [], "")
    first = author.plan(ctx)  # the offline row-wise template applies to RMSNorm on TPU
    assert first is not None and author.implement(ctx, first).template != "lm" and lm.asked == []
    from mk.profile import ProfileReport

    unmeasured = ProfileReport(task="rmsnorm", target="tpu", hardware="v6e", measured=False, reason="no TPU here")
    assert "analyst was not asked" in author.analyse(ctx, unmeasured) and lm.asked == []  # nothing timed: no call
    report = ProfileReport(task="rmsnorm", target="tpu", hardware="v6e", measured=True, candidate_s=1e-3, reference_s=2e-3,
                           speedup=2.0)
    assert "next: fuse the cast" in author.analyse(ctx, report) and not author.stop_reason
    assert "analyst: stop" in author.analyse(ctx, report) and author.stop_reason
    while (p := author.plan(ctx)) is not None:  # remaining seeds only; no LM plan after the stop
        assert isinstance(p.data, type(first.data))
    assert "plan" not in lm.asked


def test_fixer_that_gives_up_returns_none(task):
    lm = script(fixed_code=[{"fixed_code": BROKEN, "explanation": "same"}])  # unchanged code is rejected each try
    author = LMAuthor(accounted(lm, Accountant()), knowledge=None, attempts=2)
    from mk.author.proposal import Proposal

    assert author.fix(Context(task, "cpu", [], ""), Proposal("p", BROKEN, "r", "lm"), "TypeError: shapes") is None
    assert lm.asked == ["fixed_code", "fixed_code"]


def test_synthesized_cases_become_scales_and_cases(task):
    cases = [
        {"name": "ragged", "shapes": [[1, 5, 256], [256]], "dtypes": ["bfloat16", "float32"]},
        {"name": "huge values", "shapes": [[2, 64, 256], [256]], "dtypes": ["bfloat16", "float32"],
         "edge_case": "large_magnitude", "seed": 3},
        {"name": "zeros", "shapes": [[2, 64, 256], [256]], "dtypes": ["bfloat16", "float32"], "edge_case": "zeros",
         "seed": 4},
        {"name": "dup", "shapes": [[2, 64, 256], [256]], "dtypes": ["bfloat16", "float32"], "seed": 0},
    ]
    lm = ScriptedLM({"test_cases": [{"test_cases": cases}]})
    syn = synthesize_cases(task, lm)
    assert syn.task.shapes("syn_ragged") == [(1, 5, 256), (256,)] and "ci" in syn.task.scales
    assert [(c.scale, c.seed, c.distribution) for c in syn.cases] == [
        ("syn_ragged", 0, "normal"), ("ci", 3, "large_magnitude"), ("ci", 4, "zeros")]
    assert not any("zeros" in s for s in syn.skipped) and any("dup" in s for s in syn.skipped)
    zeros = syn.task.make_inputs("ci", 4, "zeros")  # the edge case is really drawn, not turned into normal inputs
    assert all(not np.any(np.asarray(x, np.float32)) for x in zeros)
    big = np.asarray(syn.task.make_inputs("ci", 3, "large_magnitude")[0], np.float32)
    assert np.abs(big).max() >= 300

    author = LMAuthor(accounted(ScriptedLM({"test_cases": [{"test_cases": cases[:1]}]}), Accountant()), knowledge=None)
    run_task, suite = prepare_suite(author, task, "cpu")
    assert suite.scales == ("ci", "syn_ragged", "heldout") and len(suite.for_scale("syn_ragged")) == 1
    assert suite.heldout_names == ("heldout",) and "heldout" not in run_task.scales  # judged, never shown
    assert author.accountant.calls[0].agent == "test_synthesizer"
    assert suite.task_fingerprint == run_task.fingerprint() != task.fingerprint()


def test_resolve_author_offline_and_lm(monkeypatch, tmp_path, caplog):
    author, text = resolve_author("offline")
    assert isinstance(author, OfflineAuthorAdapter) and text == ANNOUNCEMENT
    author, text = resolve_author(None)  # nothing configured (conftest clears the keys)
    assert isinstance(author, OfflineAuthorAdapter)
    author, text = resolve_author(script(), budget=Budget(max_lm_calls=3))
    assert isinstance(author, LMAuthor) and "dummy" in text and author.name == "lm:dummy"
    assert author.meter.budget.max_lm_calls == 3 and isinstance(author.knowledge, LazyKnowledge)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING):
        assert LazyKnowledge(blocker / "kb").retrieve("pallas", 2) == ""
    assert "without retrieval" in caplog.text


def test_prompt_briefs():
    hw = hardware_brief("tpu")
    assert "VMEM" in hw and "pallas_call" in hw and "not present here" in hw
    assert "pure-JAX" in hardware_brief("cpu")
    t = load_task(str(EXAMPLES / "rmsnorm.py"))
    brief = task_brief(t, "gpu")
    assert "def rmsnorm" in brief and "3 positional" in brief and "h200" in brief.lower()


# --- independent samples past DSPy's response cache ------------------------------------------
KERNEL_B = KERNEL.replace("ms", "mean_sq")
KERNEL_C = KERNEL.replace("x32", "xf")
PLAN_B = {**PLAN, "strategy": "Two passes: reduce the squares per row, then scale; simpler to tile."}


@pytest.fixture
def memory_cache(monkeypatch):
    """DSPy's response cache on (in memory, empty); the settings and the global cache come back afterwards."""
    cache = Cache(False, True, None)
    monkeypatch.setattr(dspy, "cache", cache)
    yield cache
    dspy.settings.configure(**copy.deepcopy(DEFAULT_CONFIG))


def cached_script(**overrides):
    """A ScriptedLM whose answers DSPy's response cache keeps, as it does a real LM's (DummyLM opts out)."""
    lm = script(**overrides)
    lm._cache_responses = True
    return lm


def test_a_repeated_plan_draws_a_fresh_sample_and_a_rerun_replays_from_the_cache(task, memory_cache):
    lm = cached_script(code=[{"code": KERNEL, "config_space": {}}, {"code": KERNEL_B, "config_space": {}},
                      {"code": KERNEL_C, "config_space": {}}, {"code": KERNEL, "config_space": {}}])
    meter = BudgetMeter(Budget(max_lm_calls=10))
    author = LMAuthor(accounted(lm, Accountant(None, budget=meter)), seeds=False, synthesize_tests=False)
    ctx, plan = Context(task, "cpu", [], ""), Plan("hand", "fuse the scale into the reduction pass", None)
    first = author.implement(ctx, plan)
    again = author.implement(ctx, plan)  # the same plan again: meant as another sample, not DSPy's cached answer
    assert lm.asked == ["code", "code"] and again.source.strip() == KERNEL_B.strip() != first.source.strip()
    rerun = author.fork()  # a rerun (a fresh author) replays the first answer from the cache: no call
    assert rerun.implement(ctx, plan).source == first.source and len(lm.asked) == 2
    sources = [first.source]
    for k in (1, 2):
        sources.append(author.fork(rollout=k).implement(ctx, plan).source)
    assert len(lm.asked) == 4 and len({s.strip() for s in sources}) >= 2
    assert author.fork(rollout=1).implement(ctx, plan).source == sources[1] and len(lm.asked) == 4  # replayed
    assert meter.usage().lm_calls == 4  # hits are free; every draw was metered by the shared accountant
    assert "rollout_id" not in lm.kwargs and author.fork(rollout=1).draw_lm() is not author.lm
    assert author.fork(rollout=1).draw_lm().kwargs["temperature"] == 1.0  # a rollout needs temperature > 0


def test_forked_samples_and_repeated_planner_inputs_draw_fresh_plans(task, memory_cache):
    lm = cached_script(plan=[{"plan": PLAN}, {"plan": PLAN_B}])
    author = LMAuthor(lm, seeds=False, synthesize_tests=False, temperature=0.7)
    ctx = Context(task, "cpu", [], "")
    a, b = author.plan(ctx), author.plan(ctx)  # an Auto loop that learned nothing: same inputs, a new draw
    assert lm.asked == ["plan", "plan"] and a.text != b.text
    fresh = author.fork()
    assert fresh.plan(ctx).text == a.text and len(lm.asked) == 2  # a fresh author replays the cached first plan
    sample = author.fork(rollout=3)
    assert sample.rollout == 3 and sample.temperature == 0.7 and sample.draw_lm().kwargs["temperature"] == 0.7
    sample.plan(ctx)
    assert len(lm.asked) == 3


def test_rollout_and_temperature_are_checked():
    with pytest.raises(ConfigError, match="temperature"):
        LMAuthor(script(), temperature=0.0)
    author = LMAuthor(script(), rollout=-1)
    with pytest.raises(ConfigError, match="rollout"):
        author.draw_lm()


def test_best_of_n_with_an_lm_author_makes_one_lm_call_per_sample(task, memory_cache):
    from types import SimpleNamespace

    from mk.bench.methods import MethodConfig, run_best_of_n

    lm = cached_script(code=[{"code": KERNEL, "config_space": {}}, {"code": KERNEL_B, "config_space": {}},
                      {"code": KERNEL_C, "config_space": {}}])
    author = LMAuthor(lm, seeds=False, synthesize_tests=False)
    judged = []

    def judge(task, candidate, **kw):
        judged.append(candidate.digest)
        return SimpleNamespace(status="correct", reason="", speedup=1.0, step=lambda name: None)

    row = run_best_of_n(task, author, MethodConfig(target="cpu", evaluate=judge, samples=3))
    assert row.candidates == 3 and len(set(judged)) == 3  # three different candidates, not one answer thrice
    assert lm.asked.count("plan") == 3 and lm.asked.count("code") == 3
    assert author.rollout is None
