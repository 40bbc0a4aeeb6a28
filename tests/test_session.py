"""The HITL Session: step, edit the plan and the code (judged like authored code), redo, persist and resume."""

import pytest

from fakes import ScriptedAuthor, tanh2_module

from mk.errors import ConfigError, TaskError
from mk.programs.auto import Plan
from mk.programs.session import Session, StepResult
from mk.store import Store

SIZES = {"ci": (16, 128), "big": (64, 256)}  # tanh2 (tests/fakes.py) at two sizes
GOOD = "import jax.numpy as jnp\n\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"
WRONG = "import jax.numpy as jnp\n\ndef kernel(x):\n    return jnp.tanh(x) * 2.0 + 0.5\n"
ALT = "import jax.numpy as jnp\n\ndef kernel(x):\n    return 2.0 * jnp.tanh(x)\n"


def Scripted(plans=("first", "second")):
    """Plans ``plans`` (names, no code); implements ``ALT`` when the plan text asks for it, else ``GOOD``."""
    return ScriptedAuthor([(name, None) for name in plans], rationale="plan {name}",
                          implement=lambda text: ALT if "alt" in text else GOOD)


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "tanh2_task.py"
    path.write_text(tanh2_module(SIZES, factor="2.0"))
    return path


def _session(task_file, tmp_path, **kw):
    kw.setdefault("author", Scripted())
    return Session(task_file, target="cpu", scale="ci", db=tmp_path / "s.duckdb", tune=False, **kw)


def test_edit_plan_then_code_goes_through_the_same_judge(task_file, tmp_path):
    author = Scripted()
    s = _session(task_file, tmp_path, author=author, iterations=1)
    assert s.next_phase == "plan" and s.run_id
    with pytest.raises(ConfigError):
        s.edit_plan("too early")
    r = s.step()
    assert isinstance(r, StepResult) and r.phase == "plan" and isinstance(s.artifact, Plan)
    s.edit_plan("plan first, the alt way")
    assert s.step().artifact.source == ALT and author.implemented == ["plan first, the alt way"]
    s.edit_code(WRONG)  # a human "improvement" that is wrong: the judge must catch it
    assert s.next_phase == "validate"
    r = s.step()
    assert r.phase == "validate" and not r.ok and "incorrect" in r.message
    assert s.next_phase == "snapshot"
    edited = s.edit_code(GOOD)  # fix it by hand: the failure is cleared and validation runs again
    assert edited.ok and s.next_phase == "validate"
    assert s.step().ok and s.step().phase == "test"
    best = s.run_to_end()
    assert s.done and "maximum of 1" in s.traj.stop_reason
    assert best is not None and best.correct and best.source == GOOD and "edited by hand" in best.rationale
    with Store.open(tmp_path / "s.duckdb") as store:
        run = store.get_run(s.run_id)
        assert run["mode"] == "hitl" and run["config"]["locator"]["path"] == str(task_file.resolve())
        (node,) = store.nodes(s.run_id)
        assert node["code"] == GOOD and node["plan"] == "plan first, the alt way" and node["meta"]["human_edits"] == 2
        assert node["status"] == "correct"
        assert [r["status"] for r in store.snapshots(s.run_id)] == ["correct"]
    out = s.save(tmp_path / "out" / "k.py")
    assert "verdict: correct" in out.read_text() and GOOD.strip() in out.read_text()


def test_redo_reruns_the_last_phase_and_guards(task_file, tmp_path):
    s = _session(task_file, tmp_path)
    with pytest.raises(ConfigError):
        s.redo()  # nothing ran yet
    with pytest.raises(ConfigError):
        s.save(tmp_path / "k.py")  # nothing correct yet
    s.step()
    s.step()
    assert s.next_phase == "validate"
    assert s.redo() == "implement" and s.next_phase == "implement"
    assert s.step().phase == "implement"
    s.step()
    assert s.redo() == "validate"
    assert s.step().phase == "validate" and s.next_phase == "test"
    while s.next_phase != "plan":
        last = s.step()
    assert last.phase == "snapshot"
    with pytest.raises(ConfigError):
        s.redo()  # a snapshot is final


def test_resume_restores_snapshots_and_continues_at_the_next_plan(task_file, tmp_path):
    s = _session(task_file, tmp_path, iterations=3)
    while not s.snapshots:
        s.step()
    s.step()  # the second plan is in flight when the notebook is closed
    first = s.snapshots[0]
    r = Session.resume(s.run_id, db=tmp_path / "s.duckdb", author=Scripted())
    assert r.run_id == s.run_id and r.traj.suite_hash == s.traj.suite_hash and list(r.task.scales) == ["ci"]
    (snap,) = r.snapshots
    assert (snap.proposal, snap.status, snap.source, snap.node_id) == ("first", "correct", GOOD, first.node_id)
    assert snap.result is not None and snap.result.status == "correct" and snap.speedup == first.speedup
    assert r.next_phase == "plan" and r.attempt.iteration == 2
    plan = r.step().artifact
    assert plan.name == "second"  # the plan already snapshotted is not tried again
    r.run_to_end()
    assert [x.proposal for x in r.snapshots] == ["first", "second"] and r.best is not None
    with Store.open(tmp_path / "s.duckdb") as store:
        assert len(store.snapshots(s.run_id)) == 2
        edges = store.edges(s.run_id)
        assert edges and edges[-1]["parent_id"] == first.node_id  # the new node hangs under the restored one


def test_resume_refuses_a_changed_suite_and_unknown_runs(task_file, tmp_path):
    s = _session(task_file, tmp_path)
    task_file.write_text(tanh2_module(SIZES, factor="3.0"))  # the reference changed: its outputs and the suite hash change
    with pytest.raises(TaskError, match="frozen suite changed"):
        Session.resume(s.run_id, db=tmp_path / "s.duckdb", author=Scripted())
    with pytest.raises(Exception, match="no run"):
        Session.resume("nope", db=tmp_path / "s.duckdb")
    with pytest.raises(ConfigError, match="scripted"):
        task_file.write_text(tanh2_module(SIZES, factor="2.0"))
        Session.resume(s.run_id, db=tmp_path / "s.duckdb")  # the run's author was not the offline one


def test_resume_an_auto_run_finds_its_scale(task_file, tmp_path):
    from mk.loaders import load_task
    from mk.programs.auto import Auto

    task = load_task(task_file)
    task = task.with_scales({"ci": task.scale("ci")})  # as `mk optimize --scale ci` does; the run does not record it
    with Store.open(tmp_path / "a.duckdb") as store:
        traj = Auto(Scripted(["first"]), target="cpu", iterations=1, tune=False, store=store).run(task)
    assert traj.best is not None
    r = Session.resume(traj.run_id, db=tmp_path / "a.duckdb", author=Scripted(), iterations=2)
    assert list(r.task.scales) == ["ci"] and r.traj.suite_hash == traj.suite_hash
    assert [s.proposal for s in r.snapshots] == ["first"] and r.next_phase == "plan"


def test_default_author_is_offline_and_results_render(tmp_path):
    s = Session("examples/rmsnorm.py", target="tpu", scale="ci", db=":memory:")
    r = s.step()
    assert r.phase == "plan" and r.artifact.name == "rowwise-tpu"
    bundle = r._repr_mimebundle_()
    assert "plan: ok" in bundle["text/plain"] and "<html" in bundle["text/html"].lower()
    code = s.step()
    assert "def kernel" in code._repr_mimebundle_()["text/plain"]
    assert "next phase: validate" in s._repr_mimebundle_()["text/plain"]
