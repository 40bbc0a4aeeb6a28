"""A tuning trial is a screen, not a verdict to keep: the judge's costliest checks are left to the winner, which the
tuner judges whole (mk.harness.evaluate's ``screen``; mk.tuning.autotune)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import tanh_mix_task

from mk.candidate import Candidate
from mk.harness import build_suite, evaluate
from mk.harness.results import SCREEN_FLAG, SCREENED, EvalResult, TimingResult, trial_status
from mk.tuning.autotune import autotune

ADV = Path(__file__).parent / "adversarial"


TANH = tanh_mix_task({"ci": 16}, name="screen_tanh_mix")


@pytest.fixture(scope="module")
def suite():
    return build_suite(TANH)


@pytest.mark.parametrize("fixture, whole", [
    ("r2_semantics_dma_race.py", "race detector found a data race"),  # the TPU-interpreter check
    ("r2_nowork_plus_zero.py", "FLOPs run outside the kernels"),  # ablation
])
def test_a_screen_leaves_out_the_checks_the_whole_verdict_makes(fixture, whole, suite):
    screened = evaluate(TANH, ADV / fixture, target="tpu", suite=suite.subset(2), measure=False, screen=True)
    assert screened.status == "correct" and screened.reason.startswith("screened (a tuning trial, not a verdict to keep)")
    assert SCREEN_FLAG in screened.flags
    verdict = evaluate(TANH, ADV / fixture, target="tpu", suite=suite, measure=False)
    assert verdict.status == "rejected" and whole in verdict.reason, verdict.reason
    assert SCREEN_FLAG not in verdict.flags


def test_trials_are_screens_and_the_winner_is_judged_whole(suite):
    cand = Candidate.from_source("import jax.numpy as jnp\n\nCONFIG_SPACE = {'a': [1, 2]}\n\n"
                                 "def kernel(x, y, *, a=1):\n    return jnp.tanh(x) * y + 0.5 * x\n")
    calls = []

    def judge(task, candidate, *, target, suite, config, **options):
        calls.append((dict(config), options.get("screen", False), len(suite.cases)))
        if options.get("screen"):  # the screen passes both; the whole verdict refuses a=2
            return EvalResult(status="correct", reason="screened (a tuning trial, not a verdict to keep): ok", task=task.name,
                              target=target, timing=TimingResult(measured=True, candidate_median_s=config["a"] * -1e-3 + 1e-2))
        bad = config["a"] == 2
        return EvalResult(status="rejected" if bad else "correct", reason="the race check" if bad else "ok", task=task.name,
                          target=target, timing=TimingResult(measured=True, candidate_median_s=1e-2))

    result = autotune(TANH, cand, target="tpu", suite=suite, evaluate=judge, max_trials=2)
    trials = [c for c in calls if c[1]]
    assert sorted(c[0]["a"] for c in trials) == [1, 2] and {c[2] for c in trials} == {len(suite.subset(2).cases)}
    # the screens rank a=2 first (faster); it is judged whole, without screen, on the whole suite, and refused there;
    # the next by the ranking (here the default) is judged whole and kept, and the note says why
    assert [c for c in calls if not c[1]] == [({"a": 2}, False, len(suite.cases)), ({"a": 1}, False, len(suite.cases))]
    assert result.config == {"a": 1} and result.result.status == "correct"
    assert "{'a': 2} passed its screen but was refused when judged whole (rejected: the race check)" in result.note
    assert "kept {'a': 1} (the default)" in result.note
    # what a person reads: the HITL tuning table and `mk optimize`'s progress lines show a screen, not "correct"
    from rich.console import Console

    from mk.programs.session import _tuning

    console = Console(width=200, record=True)
    console.print(_tuning(result))
    table = console.export_text()
    assert "passes the screen" in table and " correct " not in table.replace("correct:", ""), table


def test_a_whole_refusal_gives_way_to_the_next_config_by_the_ranking(suite):
    """Three configs, the fastest refused when judged whole: the second fastest is kept, not the slower default."""
    cand = Candidate.from_source("import jax.numpy as jnp\n\nCONFIG_SPACE = {'a': [1, 2, 4]}\n\n"
                                 "def kernel(x, y, *, a=1):\n    return jnp.tanh(x) * y + 0.5 * x\n")
    whole = []

    def judge(task, candidate, *, target, suite, config, **options):
        time = {1: 10e-6, 2: 5e-6, 4: 2e-6}[config["a"]]
        if not options.get("screen"):
            whole.append(config["a"])
            if config["a"] == 4:
                return EvalResult(status="rejected", reason="a race", task=task.name, target=target)
        return EvalResult(status="correct", reason="ok", task=task.name, target=target,
                          timing=TimingResult(measured=True, candidate_median_s=time))

    result = autotune(TANH, cand, target="tpu", suite=suite, evaluate=judge, max_trials=3)
    assert whole == [4, 2] and result.config == {"a": 2} and result.result.status == "correct"
    assert "refused when judged whole (rejected: a race)" in result.note


def test_a_judge_without_screens_is_asked_as_before(suite):
    cand = Candidate.from_source("import jax.numpy as jnp\n\nCONFIG_SPACE = {'a': [1, 2]}\n\n"
                                 "def kernel(x, y, *, a=1):\n    return jnp.tanh(x) * y + 0.5 * x\n")

    def judge(task, candidate, *, target, suite, config):  # no **options: no screen, no claim
        return EvalResult(status="correct", reason="ok", task=task.name, target=target,
                          timing=TimingResult(measured=False, reason="no device"))

    assert autotune(TANH, cand, target="tpu", suite=suite, evaluate=judge, max_trials=2).result.status == "correct"


def test_without_a_figure_to_rank_by_the_default_is_kept_without_trials(suite):
    """No device to time a config and no compiler estimate for the target (a GPU kernel here): the trials could only
    be validity checks whose results are thrown away, so none runs; the default is judged once as a kept verdict."""
    cand = Candidate.from_source("import jax.numpy as jnp\n\nCONFIG_SPACE = {'a': [1, 2, 4]}\n\n"
                                 "def kernel(x, y, *, a=2):\n    return jnp.tanh(x) * y + 0.5 * x\n")
    calls = []

    def judge(task, candidate, *, target, suite, config, **options):
        calls.append((dict(config), options))
        return EvalResult(status="correct", reason="ok", task=task.name, target=target,
                          timing=TimingResult(measured=False, reason="not measured: no gpu device here"))

    default = EvalResult(status="correct", reason="the default on the whole suite", task=TANH.name, target="gpu",
                         timing=TimingResult(measured=False, reason="not measured: no gpu device here"),
                         flags=["no speed estimate on h100: the estimate is for TPU chips only"])
    result = autotune(TANH, cand, target="gpu", suite=suite, evaluate=judge, max_trials=3, judged_default=default)
    assert result.trials == [] and result.config == {"a": 2} and result.result.status == "correct"
    assert len(calls) == 1 and calls[0][0] == {"a": 2} and calls[0][1].get("claim") is True  # one kept verdict
    assert result.note.startswith("not tuned: not measured: no gpu device here; no speed estimate on h100")
    assert not result.measured and not result.estimated
    # the judged default is the entry's keyword defaults: when they are not in the space, it says nothing of the
    # config tuning would start from, so the configs are tried as before
    outside = Candidate.from_source(cand.source.replace("a=2", "a=8"))
    calls.clear()
    tried = autotune(TANH, outside, target="gpu", suite=suite, evaluate=judge, max_trials=3, judged_default=default)
    assert len(tried.trials) == 3 and not tried.note.startswith("not tuned")


def test_no_trials_asked_for_judges_nothing_again(suite):
    """--trials 0 (max_trials=0): the default's own verdict stands, whatever its figures; before, a default without a
    figure was judged again as a kept verdict (its claimed case at full took minutes for a matmul example)."""
    cand = Candidate.from_source("import jax.numpy as jnp\n\nCONFIG_SPACE = {'a': [1, 2]}\n\n"
                                 "def kernel(x, y, *, a=1):\n    return jnp.tanh(x) * y + 0.5 * x\n")
    calls = []
    default = EvalResult(status="correct", reason="the default on the whole suite", task=TANH.name, target="tpu",
                         timing=TimingResult(measured=False, reason="not measured: no tpu device here"))
    result = autotune(TANH, cand, target="tpu", suite=suite, evaluate=lambda *a, **k: calls.append(k), max_trials=0,
                      judged_default=default)
    assert calls == [] and result.config == {} and result.result is default and result.trials == []


def test_a_screen_is_shown_as_one_and_a_verdict_as_itself():
    assert trial_status("correct", f"{SCREENED}: all 3 cases match") == "passes the screen"
    assert trial_status("correct", "all 5 cases match the reference") == "correct"
    assert trial_status("incorrect", f"{SCREENED}: case 1 differs") == "incorrect"  # a failed screen is a failure
