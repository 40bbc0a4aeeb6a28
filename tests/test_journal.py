import math
import os
import subprocess
import sys
import textwrap

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.storages.journal import BaseJournalBackend
from optuna.study import StudyDirection
from optuna.trial import TrialState

from mk.store import Store
from mk.tuning import DuckDBJournalBackend, fail_interrupted_trials, journal_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)


def objective(trial):
    x = trial.suggest_float("x", -1.0, 1.0)
    n = trial.suggest_int("n", 1, 4)
    return (x - 0.3) ** 2 + n


def test_backend_is_an_optuna_journal_backend_and_numbers_logs(tmp_path):
    with Store.open(tmp_path / "j.duckdb") as store:
        backend = DuckDBJournalBackend(store, "j1")
        assert isinstance(backend, BaseJournalBackend)
        assert list(backend.read_logs(0)) == []
        backend.append_logs([{"op": 0}, {"op": 1, "v": float("inf")}])
        backend.append_logs([{"op": 2, "v": float("nan")}])
        backend.append_logs([])
        DuckDBJournalBackend(store, "other").append_logs([{"op": "x"}])
        logs = list(backend.read_logs(0))
        assert [entry["op"] for entry in logs] == [0, 1, 2]
        assert logs[1]["v"] == math.inf and math.isnan(logs[2]["v"])
        assert [entry["op"] for entry in backend.read_logs(2)] == [2]
        assert list(backend.read_logs(3)) == []
        nums = store.query("SELECT log_number FROM optuna_journal WHERE journal = 'j1' ORDER BY log_number")
        assert [r["log_number"] for r in nums] == [0, 1, 2]


def test_study_resumes_from_a_new_store(tmp_path):
    path = tmp_path / "resume.duckdb"
    with Store.open(path) as store:
        study = optuna.create_study(study_name="s", storage=journal_storage(store, "run-1"),
                                    sampler=optuna.samplers.RandomSampler(seed=0))
        study.optimize(objective, n_trials=4)
        first = [(t.number, t.params, t.value) for t in study.trials]
    with Store.open(path) as store:
        study = optuna.load_study(study_name="s", storage=journal_storage(store, "run-1"),
                                  sampler=optuna.samplers.RandomSampler(seed=1))
        assert [(t.number, t.params, t.value) for t in study.trials] == first
        study.optimize(objective, n_trials=3)
        assert [t.number for t in study.trials] == list(range(7))
        assert all(t.state == TrialState.COMPLETE for t in study.trials)
        assert study.best_value == min(v for _, _, v in first + [(0, 0, t.value) for t in study.trials])
    with Store.open(path) as store:  # another journal in the same file is a separate world
        assert optuna.get_all_study_names(journal_storage(store, "run-2")) == []


def test_backend_opened_by_path_owns_its_store(tmp_path):
    path = tmp_path / "by-path.duckdb"
    backend = DuckDBJournalBackend(path, "j")
    storage = optuna.storages.JournalStorage(backend)
    optuna.create_study(study_name="p", storage=storage).optimize(objective, n_trials=2)
    backend.close()
    with Store.open(path) as store:
        assert len(optuna.load_study(study_name="p", storage=journal_storage(store, "j")).trials) == 2


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import optuna
    from mk.store import Store
    from mk.tuning import journal_storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = Store.open(sys.argv[1])
    study = optuna.create_study(study_name="k", storage=journal_storage(store, "jk"),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    def objective(trial):
        x = trial.suggest_float("x", -1.0, 1.0)
        if trial.number == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # die mid-trial, mid-study
        return (x - 0.3) ** 2
    study.optimize(objective, n_trials=10)
    """
)


def test_killed_study_resumes_with_completed_trials_intact(tmp_path):
    path = tmp_path / "killed.duckdb"
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == -9, proc.stderr
    with Store.open(path) as store:
        study = optuna.load_study(study_name="k", storage=journal_storage(store, "jk"))
        states = [t.state for t in study.trials]
        assert states == [TrialState.COMPLETE] * 3 + [TrialState.RUNNING]
        for t in study.trials[:3]:
            assert t.value == pytest.approx((t.params["x"] - 0.3) ** 2)
        kept = [(t.params, t.value) for t in study.trials[:3]]
        assert fail_interrupted_trials(study) == [3]
        assert fail_interrupted_trials(study) == []
        assert study.trials[3].state == TrialState.FAIL
        study.optimize(lambda tr: (tr.suggest_float("x", -1.0, 1.0) - 0.3) ** 2, n_trials=2)
        assert [(t.params, t.value) for t in study.trials[:3]] == kept
        assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3 + [TrialState.FAIL] + [TrialState.COMPLETE] * 2


def test_storage_conformance(tmp_path):
    with Store.open(tmp_path / "c.duckdb") as store:
        storage = journal_storage(store, "conf")
        sid = storage.create_new_study([StudyDirection.MINIMIZE, StudyDirection.MAXIMIZE], "multi")
        assert storage.get_study_id_from_name("multi") == sid
        assert storage.get_study_name_from_id(sid) == "multi"
        assert storage.get_study_directions(sid) == [StudyDirection.MINIMIZE, StudyDirection.MAXIMIZE]
        with pytest.raises(optuna.exceptions.DuplicatedStudyError):
            storage.create_new_study([StudyDirection.MINIMIZE], "multi")
        storage.set_study_user_attr(sid, "task", "mm")
        storage.set_study_system_attr(sid, "mk:run", "r1")
        tid = storage.create_new_trial(sid)
        storage.set_trial_param(tid, "bm", 128, IntDistribution(64, 512, step=64))
        storage.set_trial_param(tid, "lr", 0.5, FloatDistribution(0.0, 1.0))
        storage.set_trial_user_attr(tid, "reason", "ok")
        storage.set_trial_intermediate_value(tid, 0, 3.0)
        assert storage.set_trial_state_values(tid, TrialState.COMPLETE, [1.0, 2.0])
        other = storage.create_new_trial(sid)
        storage.set_trial_state_values(other, TrialState.FAIL)

        fresh = journal_storage(store, "conf")  # a second reader replays the same log
        for s in (storage, fresh):
            assert s.get_study_user_attrs(sid) == {"task": "mm"}
            assert s.get_study_system_attrs(sid)["mk:run"] == "r1"
            trial = s.get_trial(tid)
            assert trial.params == {"bm": 128, "lr": 0.5}
            assert trial.user_attrs == {"reason": "ok"}
            assert trial.intermediate_values == {0: 3.0}
            assert trial.values == [1.0, 2.0] and trial.state == TrialState.COMPLETE
            assert [t.state for t in s.get_all_trials(sid)] == [TrialState.COMPLETE, TrialState.FAIL]
            assert s.get_n_trials(sid, state=TrialState.COMPLETE) == 1
        assert [st.study_name for st in fresh.get_all_studies()] == ["multi"]
        storage.delete_study(sid)
        assert journal_storage(store, "conf").get_all_studies() == []
