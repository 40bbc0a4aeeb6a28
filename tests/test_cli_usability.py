"""A new user's rough edges: matching suite hashes, failing early on a bad --db/--out, Ctrl-C, run-id prefixes,
autotuning that judges a repeated config once and prints no Optuna tracebacks."""

from __future__ import annotations

import json
import textwrap

import pytest

import mk.harness
from mk.candidate import Candidate
from mk.cli import main
from mk.harness.results import EvalResult, SpeedEstimate, TimingResult
from mk.harness.suite import build_suite
from mk.loaders import load_task
from mk.store import Store

TASK = textwrap.dedent("""
    import jax.numpy as jnp
    from mk.task import ArgSpec, Scale, Task

    def reference(x, w):
        return jnp.tanh(x) * w

    TASK = Task("tanh_scale", reference, (ArgSpec("x", ("m", "n"), "float32"), ArgSpec("w", ("n",), "float32")),
                {"ci": Scale("ci", {"m": 8, "n": 32}), "full": Scale("full", {"m": 64, "n": 128})})
""")
GOOD = "import jax.numpy as jnp\n\ndef kernel(x, w):\n    return jnp.tanh(x) * w\n"


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "task_tanh.py").write_text(TASK)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "a_file").write_text("not a folder")
    return tmp_path


def test_eval_scale_suite_hash_matches_optimize_scale(files, capsys):
    """`mk eval --scale ci` judges on the suite `mk optimize --scale ci` froze, so the hashes agree."""
    code = main(["eval", str(files / "task_tanh.py"), str(files / "good.py"), "--scale", "ci", "--no-time", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["reason"]
    task = load_task(files / "task_tanh.py")
    assert out["suite_hash"] == build_suite(task.with_scales({"ci": task.scale("ci")})).hash


def test_eval_bad_db_fails_before_judging(files, capsys, monkeypatch):
    def never(*a, **k):
        raise AssertionError("evaluate ran although the store cannot be opened")

    monkeypatch.setattr(mk.harness, "evaluate", never)
    code = main(["eval", str(files / "task_tanh.py"), str(files / "good.py"), "--scale", "ci", "--db", str(files / "a_file" / "x.duckdb")])
    assert code == 2 and "store" in capsys.readouterr().err


def test_optimize_unwritable_out_fails_before_the_run(files, capsys):
    db = files / "db.duckdb"
    code = main(["optimize", str(files / "task_tanh.py"), "--lm", "offline", "--target", "cpu", "--scale", "ci",
                 "--db", str(db), "--out", str(files / "a_file" / "out")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "cannot write to the output folder" in err and "Traceback" not in err
    assert not db.exists()  # nothing ran


def test_ctrl_c_marks_the_auto_run_interrupted(files, capsys, monkeypatch):
    from mk.programs.auto import Auto

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Auto, "step", interrupted)  # Ctrl-C in the middle of a phase
    db = files / "db.duckdb"
    code = main(["optimize", str(files / "task_tanh.py"), "--lm", "offline", "--target", "tpu", "--scale", "ci",
                 "--db", str(db), "--out", str(files / "out")])
    assert code == 130 and "kept" in capsys.readouterr().err
    with Store.open(db) as store:
        (run,) = store.list_runs()
    assert run["status"] == "interrupted" and run["finished_at"] is not None


def test_hitl_resume_accepts_the_prefix_mk_runs_prints(files):
    from mk.programs.session import Session

    s = Session(str(files / "task_tanh.py"), target="tpu", author=None, db=files / "s.duckdb", scale="ci", iterations=1)
    r = Session.resume(s.run_id[:12], db=files / "s.duckdb")
    assert r.run_id == s.run_id


def _fake_task_and_suite(files):
    task = load_task(files / "task_tanh.py")
    task = task.with_scales({"ci": task.scale("ci")})
    return task, build_suite(task)


def test_autotune_judges_a_repeated_config_once_and_prints_no_traceback(files, capfd):
    from mk.tuning.autotune import autotune

    task, suite = _fake_task_and_suite(files)
    cand = Candidate.from_source(GOOD.replace("def kernel(x, w):", "CONFIG_SPACE = {'a': [1, 2], 'b': [1, 2]}\n\ndef kernel(x, w, a=1, b=1):"))
    calls = []

    def fake_evaluate(task, candidate, *, target, suite, config):
        calls.append(dict(config))
        bad = config.get("a") == 2 and config.get("b") == 2
        return EvalResult(status="incorrect" if bad else "correct", reason="wrong" if bad else "ok", task=task.name, target=target,
                          timing=TimingResult(measured=False, reason="no device"))

    result = autotune(task, cand, target="tpu", suite=suite, evaluate=fake_evaluate, max_trials=3)
    trials = [tuple(sorted(o.params.items())) for o in result.trials]
    keys = [tuple(sorted(c.items())) for c in calls[:-1]]  # the last call re-verifies the winner on the whole suite
    assert len(trials) == 3 and len(set(trials)) < len(trials)  # the seeded sampler repeats a config here
    assert sorted(keys) == sorted(set(trials)), f"each config is judged once: {keys}"
    assert result.result is not None and result.result.status == "correct"
    err = capfd.readouterr().err
    assert "Traceback" not in err and "failed with parameters" not in err


def test_the_trial_of_the_default_config_reuses_its_verdict_on_the_whole_suite(files):
    from mk.tuning.autotune import autotune

    task, suite = _fake_task_and_suite(files)
    cand = Candidate.from_source(GOOD.replace("def kernel(x, w):", "CONFIG_SPACE = {'a': [1, 2]}\n\ndef kernel(x, w, *, a=2):"))
    calls = []

    def fake_evaluate(task, candidate, *, target, suite, config):
        calls.append((dict(config), len(suite.cases)))
        return EvalResult(status="correct", reason="ok", task=task.name, target=target,
                          timing=TimingResult(measured=False, reason="no device"))

    judged = EvalResult(status="correct", reason="the default, judged on the whole suite", task=task.name, target="tpu",
                        timing=TimingResult(measured=True, candidate_median_s=1e-3))  # a figure: the configs are tuned
    result = autotune(task, cand, target="tpu", suite=suite, evaluate=fake_evaluate, max_trials=2, judged_default=judged)
    assert {tuple(o.params.items()) for o in result.trials} == {(("a", 1),), (("a", 2),)}
    assert [o.reason for o in result.trials if o.params == {"a": 2}] == ["the default, judged on the whole suite"]
    # judged: the other config on the fast subset, then the winner (the default) on the whole suite
    assert calls == [({"a": 1}, len(suite.subset(2).cases)), ({"a": 2}, len(suite.cases))]
    # a default the keyword defaults do not give (no default for a) is judged as before
    calls.clear()
    plain = Candidate.from_source(GOOD.replace("def kernel(x, w):", "CONFIG_SPACE = {'a': [1, 2]}\n\ndef kernel(x, w, *, a=None):"))
    autotune(task, plain, target="tpu", suite=suite, evaluate=fake_evaluate, max_trials=2, judged_default=judged)
    assert len(calls) == 3


def _estimated(kernel_us: float, scale: str = "full") -> SpeedEstimate:
    return SpeedEstimate(chip="v6e", scale=scale, kernel_s=kernel_us * 1e-6, kernel_bound="memory", baseline_s=100e-6,
                         baseline_bound="memory", estimated_speedup=100 / kernel_us, model="a test model", judged=False)


def test_without_the_device_configs_are_ranked_by_the_compilers_estimate_and_say_so(files, tmp_path):
    from mk.tuning.autotune import autotune

    task, suite = _fake_task_and_suite(files)
    cand = Candidate.from_source(GOOD.replace("def kernel(x, w):", "CONFIG_SPACE = {'a': [1, 2, 4]}\n\ndef kernel(x, w, *, a=1):"))
    kernel_us = {1: 90.0, 2: 40.0, 4: 60.0}
    finals = []

    def fake_evaluate(task, candidate, *, target, suite, config, **options):
        if not options.get("screen"):  # the trials are screens; the winner is judged whole
            finals.append(dict(config))
        return EvalResult(status="correct", reason="ok", task=task.name, target=target, estimate=_estimated(kernel_us[config["a"]]),
                          timing=TimingResult(measured=False, reason="no device"))

    with Store.open(tmp_path / "t.duckdb") as store:
        result = autotune(task, cand, target="tpu", suite=suite, evaluate=fake_evaluate, max_trials=3, store=store, run_id="r")
        rows = store.trials(run_id="r")
    assert result.config == {"a": 2} and finals == [{"a": 2}]
    assert result.estimated and not result.measured
    assert "compiler's estimate for v6e at full" in result.note and "an estimate, not a measurement" in result.note
    assert {o.params["a"]: o.estimated_s for o in result.trials} == pytest.approx({a: us * 1e-6 for a, us in kernel_us.items()})
    assert all(o.seconds is None for o in result.trials)  # nothing estimated is recorded as measured
    assert {r["basis"] for r in rows} == {"estimated v6e at full"}
    # configs the estimate cannot tell apart (memory-bound: bytes over bandwidth whatever the blocks) keep the default
    kernel_us.update({1: 40.5, 2: 40.0, 4: 40.2})
    result = autotune(task, cand, target="tpu", suite=suite, evaluate=fake_evaluate, max_trials=3)
    assert result.config == {"a": 1} and result.estimated and "kept the default config" in result.note, result.note
    kernel_us.update({1: 90.0, 2: 40.0, 4: 60.0})
    # estimates of different sizes (or one config without one) do not rank: the default is kept, as without any
    kernel_us.update({4: 10.0})
    mixed = lambda task, candidate, **kw: fake_evaluate(task, candidate, **kw).model_copy(
        update={"estimate": _estimated(kernel_us[kw["config"]["a"]], "ci" if kw["config"]["a"] == 4 else "full")})
    result = autotune(task, cand, target="tpu", suite=suite, evaluate=mixed, max_trials=3)
    assert result.config == {"a": 1} and not result.estimated and "kept the default" in result.note
    # a trial measured on a device beside trials estimated here (a study resumed elsewhere) is not compared either
    def measured_one(task, candidate, **kw):
        res = fake_evaluate(task, candidate, **kw)
        if kw["config"]["a"] == 4:
            return res.model_copy(update={"estimate": None, "timing": TimingResult(measured=True, candidate_median_s=1e-9)})
        return res

    result = autotune(task, cand, target="tpu", suite=suite, evaluate=measured_one, max_trials=3)
    assert result.config == {"a": 1} and not result.measured and "cannot be compared" in result.note, result.note


def test_a_config_the_chips_compiler_refuses_is_a_pruned_trial_with_the_reason(files, monkeypatch):
    import optuna

    from mk.harness.results import CompileResult
    from mk.tuning.autotune import autotune

    task, suite = _fake_task_and_suite(files)
    cand = Candidate.from_source(GOOD.replace("def kernel(x, w):", "CONFIG_SPACE = {'a': [1, 2]}\n\ndef kernel(x, w, a=1):"))
    refusal = "the TPU v6e compiler refuses the kernel at scale ci: RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem"

    def fake_evaluate(task, candidate, *, target, suite, config, **_):
        if config.get("a") == 2:
            return EvalResult(status="compile_error", reason=refusal, task=task.name, target=target,
                              compiled=[CompileResult(chip="v6e", scale="ci", ok=False, error="Ran out of memory")])
        return EvalResult(status="correct", reason="ok", task=task.name, target=target,
                          timing=TimingResult(measured=False, reason="no device"))

    pruned = []
    real = optuna.Study.optimize

    def watched(study, *a, **k):
        real(study, *a, **k)
        pruned.extend(t.params for t in study.trials if t.state == optuna.trial.TrialState.PRUNED)

    monkeypatch.setattr(optuna.Study, "optimize", watched)
    result = autotune(task, cand, target="tpu", suite=suite, evaluate=fake_evaluate, max_trials=2)
    assert pruned == [{"a": 2}]
    assert result.config == {"a": 1} and result.result.status == "correct"
    refused = [o for o in result.trials if o.params == {"a": 2}]
    assert refused and refused[0].status == "compile_error" and "vmem" in refused[0].reason


def test_hitl_unknown_answer_lists_the_choices(files, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("help\nq\n"))
    code = main(["hitl", str(files / "task_tanh.py"), "--lm", "offline", "--target", "tpu", "--scale", "ci",
                 "--db", str(files / "h.duckdb"), "--out", str(files / "out")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "unknown answer 'help'" in out and "q stops" in out


def test_unusable_lm_is_a_usage_error_and_fails_the_run(files, capsys, monkeypatch):
    from dspy.utils.exceptions import LMNotConfiguredError

    from mk.programs.auto import Auto

    def no_key(self, *a, **k):
        raise LMNotConfiguredError("[gemini/x] no API key found for provider 'gemini'")

    monkeypatch.setattr(Auto, "step", no_key)
    db = files / "db.duckdb"
    code = main(["optimize", str(files / "task_tanh.py"), "--lm", "offline", "--target", "tpu", "--scale", "ci",
                 "--db", str(db), "--out", str(files / "out")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "[gemini/x] no API key" in err and "--lm offline" in err and "Traceback" not in err
    with Store.open(db) as store:
        (run,) = store.list_runs()
    assert run["status"] == "failed"


def test_iterations_must_be_positive(files):
    with pytest.raises(SystemExit) as exc:
        main(["optimize", str(files / "task_tanh.py"), "--iterations", "0"])
    assert exc.value.code == 2
