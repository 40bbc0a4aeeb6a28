"""Bench noise (mk/bench/noise.py): best kernels timed again side by side, one set of runs per distinct kernel,
median and spread per row, ties where spreads overlap."""

from __future__ import annotations

from fakes import tanh2_task

from mk.bench.noise import mark_ties, retime
from mk.bench.results import TaskRow
from mk.harness.results import EvalResult, TimingResult
from mk.store import Store

A = "import jax.numpy as jnp\n\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"
B = "import jax.numpy as jnp\n\ndef kernel(x):\n    return 2.0 * jnp.tanh(x)\n"


def _task():
    return tanh2_task()


def _row(store, method, code, speedup):
    run = store.create_run(None, "bench", {"target": "cpu"})
    store.add_node(run, None, code=code, status="correct", speedup=speedup, meta={"template": "rewrite"})
    return TaskRow(method, "tanh2", "correct", "ok", compiled=True, correct=True, speedup=speedup, run_id=run)


def test_best_kernels_are_timed_again_side_by_side_and_ties_marked(tmp_path):
    timings = {A: iter([1.9, 2.1, 2.0]), B: iter([1.2, 1.3, 1.25])}
    order = []

    def judge(task, candidate, *, target, suite, measure, config, **kw):
        order.append(candidate.source)
        s = next(timings[candidate.source])
        return EvalResult(status="correct", reason="ok", task=task.name, target=target,
                          timing=TimingResult(measured=True, speedup=s, candidate_median_s=1e-3 / s, reference_median_s=1e-3))

    with Store.open(tmp_path / "b.duckdb") as store:
        auto, bon, search = _row(store, "auto", A, 2.4), _row(store, "best-of-n", A, 1.8), _row(store, "search", B, 1.6)
        retime(_task(), [auto, bon, search], store=store, target="cpu", evaluate=judge, repeats=3)
    assert order == [A, B, A, B, A, B]  # round-robin, and the kernel two methods kept is timed once per round
    assert auto.speedup_runs == [2.4, 1.9, 2.1, 2.0] and auto.speedup == 2.05 and auto.spread == (1.9, 2.4)
    assert bon.speedup_runs == [1.8, 1.9, 2.1, 2.0] and bon.spread == (1.8, 2.1)
    assert search.spread == (1.2, 1.6) and search.speedup == 1.275
    assert auto.tied_with == ["best-of-n"] and bon.tied_with == ["auto"] and search.tied_with == []


def test_ties_need_overlapping_spreads():
    a = TaskRow("a", "t", "correct", speedup=2.0, correct=True)
    b = TaskRow("b", "t", "correct", speedup=1.0, correct=True)
    a.spread, b.spread = (1.9, 2.1), (0.9, 1.1)
    mark_ties([a, b])
    assert a.tied_with == [] and b.tied_with == []
    b.spread = (0.9, 1.95)
    mark_ties([a, b])
    assert a.tied_with == ["b"] and b.tied_with == ["a"]


def test_a_resumed_bench_reports_spread_and_ties_for_every_row(tmp_path):
    """Task tanh2 finished (and re-timed) before the stop, tanh3 had only its auto row: after `--resume` every
    correct row has its spread and ties — tanh2's loaded back from the store, tanh3's auto row re-timed beside the
    new best-of-n row (one kernel: one shared set of runs, so their spreads overlap: a tie)."""
    import pytest

    from mk.bench import BenchConfig, run_bench
    from mk.bench.runner import BenchInterrupted
    from bench_support import TANH, _suite

    from bench_support import GOOD
    from fakes import ScriptedAuthor

    def Tanhs():  # GOOD for both tasks
        return ScriptedAuthor([("good", GOOD)], only={"tanh2", "tanh3"})

    root = _suite(tmp_path, {"tanh2": TANH, "tanh3": TANH.replace('"tanh2"', '"tanh3"')})
    db, out = tmp_path / "b.duckdb", tmp_path / "report"

    def stop_after_tanh3_auto(kind, data):
        if kind == "task" and data["row"].task == "tanh3" and data["row"].method == "auto":
            raise KeyboardInterrupt

    cfg = dict(target="cpu", methods=("auto", "best-of-n"), scale="ci", iterations=1, samples=1, tune=False, db=db,
               out=out, plots=False, repeats=2, author_factory=Tanhs)
    with pytest.raises(BenchInterrupted) as stopped:
        run_bench(BenchConfig(str(root), **cfg), on_event=stop_after_tanh3_auto)
    before = {(r.method, r.task): r for r in stopped.value.result.rows}
    assert before[("auto", "tanh2")].spread is not None and before[("auto", "tanh3")].spread is None
    res = run_bench(BenchConfig(None, resume=stopped.value.bench_id, db=db, author_factory=Tanhs))
    rows = {(r.method, r.task): r for r in res.rows}
    assert set(rows) == {(m, t) for m in ("auto", "best-of-n") for t in ("tanh2", "tanh3")}
    for (method, task), r in rows.items():
        assert r.correct and r.spread is not None and len(r.speedup_runs) == 3, (method, task, r)
        assert r.tied_with == ["best-of-n" if method == "auto" else "auto"], (method, task, r.tied_with, r.spread)
    # tanh2 was not timed again: what its noise step measured came back from the store
    assert rows[("auto", "tanh2")].speedup_runs == before[("auto", "tanh2")].speedup_runs
    # tanh3's kept row kept its own first measurement and got the new side-by-side runs
    assert rows[("auto", "tanh3")].speedup_runs[0] == before[("auto", "tanh3")].speedup
    report = (out / "report.md").read_text()
    assert report.count(" runs), tie with ") == 4, report
