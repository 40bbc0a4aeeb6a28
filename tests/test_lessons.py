"""Lessons (mk/lessons.py): a fix that resolved an error and a plan that worked are kept with their provenance,
retrieved for the fixer and planner of a later run on a similar task, listed and dropped with `mk kb lessons`."""

from __future__ import annotations

import dataclasses

import pytest

from fake_gemini import FakeGemini
from mk.cli import main
from mk.lessons import rank, words
from mk.loaders import load_task
from mk.programs.auto import Auto
from mk.programs.lm_author import LMAuthor
from mk.store import Store

from lm_fakes import Agents, BROKEN, EXAMPLES, KERNEL, PLAN_A, STOP, fresh_dspy, gemini, prompts


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)


def _run(task, db, **answers):
    with FakeGemini() as fake:
        fake.route(Agents(**answers))
        with Store.open(db) as store:
            author = LMAuthor(gemini(fake), knowledge=None, seeds=False, synthesize_tests=False)
            traj = Auto(author, target="cpu", iterations=1, tune=False, store=store).run(task)
        return traj, fake


def test_run_two_on_a_similar_task_gets_run_ones_fix_and_plan(tmp_path):
    base = load_task(str(EXAMPLES / "rmsnorm.py"))
    first = base.with_scales({"ci": base.scale("ci")})
    db = tmp_path / "l.duckdb"
    script = dict(plan=[{"plan": PLAN_A}], code=[{"code": BROKEN, "config_space": {}}],
                  fixed_code=[{"fixed_code": KERNEL, "explanation": "weight has the hidden size: scale elementwise"}],
                  analysis=[{"analysis": STOP}])
    traj1, fake1 = _run(first, db, **script)
    assert traj1.best is not None
    fix1 = prompts(fake1, "fixed_code")[0]
    assert "earlier runs" not in fix1  # nothing learned yet
    with Store.open(db) as store:
        fixes, plans = store.lessons(kind="fix"), store.lessons(kind="plan")
    assert len(fixes) == 1 and fixes[0]["run_id"] == traj1.run_id and "weight[:3]" in fixes[0]["lesson"]
    assert "dot_general" in fixes[0]["problem"] and fixes[0]["target"] == "cpu"
    assert len(plans) == 1 and PLAN_A["strategy"] in plans[0]["lesson"]

    # run 2: another task of the same kind (another name, another size), the same mistake
    second = dataclasses.replace(base, name="rms_norm_wide").with_scales({"ci": dataclasses.replace(base.scale("ci"))})
    traj2, fake2 = _run(second, db, **script)
    fix2 = prompts(fake2, "fixed_code")[0]
    assert "Fixes that resolved similar errors in earlier runs" in fix2 and f"from run {traj1.run_id[:12]}" in fix2
    assert "-    return (x32 * jax.lax.rsqrt(ms + eps) @ weight[:3]).astype(x.dtype)" in fix2
    plan2 = prompts(fake2, "plan")[0]
    assert "Plans that worked in earlier runs on similar tasks" in plan2 and PLAN_A["strategy"] in plan2

    # listed with provenance; a dropped lesson is never given again
    assert main(["kb", "lessons", "--db", str(db), "--kind", "fix", "--json"]) == 0
    first_fix = fixes[0]["id"]
    assert main(["kb", "lessons", "--db", str(db), "--drop", first_fix[:8]]) == 0
    with Store.open(db) as store:
        live = [r["id"] for r in store.lessons(kind="fix")]
        assert first_fix not in live and len(store.lessons(kind="fix", dropped=True)) == len(live) + 1


def test_lessons_cli_lists_and_refuses_unknown_ids(tmp_path, capsys):
    db = tmp_path / "c.duckdb"
    with Store.open(db) as store:
        store.add_lesson(kind="fix", target="tpu", task="mm", shape_class="rank 2/2; bfloat16; ~1e5 elements",
                         problem="ValueError: block shape (100, 128) not divisible by (8, 128)", lesson="-bm=100\n+bm=128",
                         run_id="r1")
    assert main(["kb", "lessons", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "not divisible" in out and "mm" in out
    assert main(["kb", "lessons", "--db", str(db), "--drop", "zzz"]) == 2
    assert "no lesson matches" in capsys.readouterr().err
    assert main(["kb", "lessons", "--db", str(tmp_path / "missing.duckdb")]) == 2  # a mistyped store is not created


def test_ranking_needs_shared_meaningful_words():
    rows = [{"problem": "ValueError: block shape (100, 128) not divisible by (8, 128) in BlockSpec", "task": "mm"},
            {"problem": "TypeError: dot_general requires contracting dimensions to have the same shape", "task": "norm"}]
    assert rank("dot_general requires contracting dimensions got (256,) and (3,)", rows, 1)[0]["task"] == "norm"
    assert rank("something else entirely", rows) == []
    assert "256" not in words("shape (256, 3) got 256") and "shape" in words("shape (256, 3)")


class _FixingAuthor:
    """One plan whose code fails to compile; its fixer repairs it (the search's worker learns a fix and a plan)."""

    name = "fixing"

    def __init__(self):
        self.queue = [("broken", "# broken\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) @ x\n")]
        self.fixes = []

    def plan(self, ctx):
        from mk.programs.auto import Plan

        if not self.queue:
            return None
        name, code = self.queue.pop(0)
        return Plan(name, f"try the {name} formulation of tanh times two", code)

    def implement(self, ctx, plan):
        from mk.author.proposal import Proposal

        return Proposal(plan.name, plan.data, plan.text, "scripted")

    def fix(self, ctx, proposal, error):
        from mk.author.proposal import Proposal

        self.fixes.append(ctx.lessons)
        return Proposal(proposal.name, "# speed 2.0\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n",
                        proposal.rationale, "scripted")

    def analyse(self, ctx, report):
        return ""


def _judge(task, candidate, **kw):
    import search_support as sup
    from mk.harness.results import EvalResult

    if candidate.source.startswith("# broken"):
        return EvalResult(status="compile_error", reason="candidate failed the cpu compile check: TypeError: dot_general "
                          "requires contracting dimensions to have the same shape", task=task.name, target="cpu")
    return sup.stub_evaluate(task, candidate, **kw)


def test_a_search_node_keeps_its_lessons_with_its_node_and_a_later_node_recalls_them(tmp_path):
    """A worker holds no store: the node's fix and plan lessons come back with its result and are kept with the
    node's id; the next search's worker is given the live lessons and its fixer recalls the fix."""
    import search_support as sup
    from mk.programs.search import Search

    task = load_task(str(sup.write_task(tmp_path)))
    with Store.open(tmp_path / "s.duckdb") as store:
        res = Search(_FixingAuthor, algorithm="parallel", width=1, depth=1, branches=1, target="cpu", workers="inline",
                     evaluate=_judge, store=store, tune=False).run(task)
        node = res.nodes[0]
        assert node.status == "correct"
        fixes, plans = store.lessons(kind="fix"), store.lessons(kind="plan")
        assert len(fixes) == 1 and fixes[0]["node_id"] == node.node_id and fixes[0]["run_id"] == res.run_id
        assert "dot_general" in fixes[0]["problem"] and "+    return jnp.tanh(x) * 2.0" in fixes[0]["lesson"]
        assert len(plans) == 1 and plans[0]["node_id"] == node.node_id and "broken formulation" in plans[0]["lesson"]

        seen = []

        class Recalling(_FixingAuthor):
            def fix(self, ctx, proposal, error):
                seen.append(ctx.lessons)
                return super().fix(ctx, proposal, error)

        Search(Recalling, algorithm="parallel", width=1, depth=1, branches=1, target="cpu", workers="inline",
               evaluate=_judge, store=store, tune=False).run(task)
        assert seen and "+    return jnp.tanh(x) * 2.0" in seen[0] and res.run_id[:12] in seen[0]


def test_the_same_lesson_is_kept_once():
    import mk.lessons as lessons
    from mk.lessons import LessonBuffer, record_fix, record_plan

    buf = LessonBuffer()

    task = load_task(str(EXAMPLES / "rmsnorm.py"))
    for _ in range(3):
        record_fix(buf, task=task, target="tpu", error="TypeError: shapes (3,) and (256,)", before="a\n", after="b\n",
                   run_id="r1", node_id=None)
        record_plan(buf, task=task, target="tpu", plan="tile rows", speedup=None, run_id="r1", node_id=None)
    assert [r["kind"] for r in buf.new] == ["fix", "plan"]
    record_plan(buf, task=task, target="tpu", plan="tile rows", speedup=1.5, run_id="r2", node_id=None)  # now measured
    assert len(buf.new) == 3
    assert lessons.recall(buf, "TypeError: shapes (3,) and (256,)", kind="fix", target="tpu").count("lesson ") == 1
