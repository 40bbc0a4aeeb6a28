"""mk bench end to end on tiny tasks: a scripted author on cpu (measured), the offline author on tpu
(interpret: unmeasured), store rows, report and plots, and the CLI."""

import json

import pytest
from bench_support import EXPSUM, RMS, TANH, ScriptedAuthor, _suite

from mk.bench import BenchConfig, run_bench
from mk.errors import ConfigError
from mk.store import Store


def test_bench_cpu_scripted_auto_and_best_of_n(tmp_path):
    root = _suite(tmp_path, {"tanh2": TANH, "expsum": EXPSUM})
    authors = []

    def factory():
        authors.append(ScriptedAuthor())
        return authors[-1]

    db, out = tmp_path / "b.duckdb", tmp_path / "report"
    events = []
    res = run_bench(BenchConfig(str(root), target="cpu", methods=("auto", "best-of-n"), scale="ci", iterations=3, samples=3,
                                tune=False, db=db, out=out, author_factory=factory), on_event=lambda k, d: events.append((k, d)))
    assert res.can_time
    # the CLI prints each row's first measurement as it finishes, then the re-timed median the metrics use
    from mk.commands.bench import retimed_lines

    (retimed,) = [d for k, d in events if k == "retimed"]
    assert retimed["task"] == "tanh2" and {r.method for r in retimed["rows"]} == {"auto", "best-of-n"}
    for row, line in zip(retimed["rows"], retimed_lines(retimed["rows"])):
        assert f"{row.method} tanh2 {row.speedup:.2f}x (median of {len(row.speedup_runs)} runs" in line
    by = {(r.method, r.task): r for r in res.rows}
    for method in ("auto", "best-of-n"):
        good = by[(method, "tanh2")]
        assert good.status == "correct" and good.correct and good.compiled and good.candidates == 2
        assert good.speedup is not None and good.speedup > 0 and good.best == "good"
        assert [s.status for s in good.progress] == ["incorrect", "correct"]
        declined = by[(method, "expsum")]
        assert declined.status == "declined" and "nothing scripted" in declined.reason and not declined.compiled
        m = res.metrics[method]
        assert (m.tasks, m.compiled, m.correct) == (2, 1, 1) and m.speed == "measured"
        assert m.fast_p["fast_0"] == 0.5 and m.geomean_speedup == pytest.approx(max(good.speedup, 1.0))
    # best-of-n samples are independent: no history, no feedback
    auto_author, bon_author = authors[-2], authors[-1]  # tasks in order (expsum, tanh2), methods in order (auto, best-of-n)
    assert len(bon_author.contexts) == 3 and all(h == [] and f == "" for h, f in bon_author.contexts)
    assert auto_author.contexts[-1][0] and any("incorrect" in f for _, f in auto_author.contexts)  # auto feeds the verdicts back
    # everything is in the store
    with Store.open(db) as store:
        rows = store.query("SELECT method, task, status, correct, speedup FROM bench_results ORDER BY method, task")
        assert len(rows) == 4 and {r["status"] for r in rows} == {"correct", "declined"}
        runs = store.query("SELECT mode, status FROM runs")
        assert len(runs) == 4 and {r["mode"] for r in runs} == {"bench"}
        bench = store.query("SELECT status, metrics FROM bench_runs")
        assert bench[0]["status"] == "finished" and bench[0]["metrics"]["auto"]["correct"] == 1
        assert store.query("SELECT count(*) AS n FROM evaluations")[0]["n"] >= 4
    # report and plots
    text = (out / "report.md").read_text()
    assert "| tanh2 | auto | correct |" in text and "fast_p.png" in text and "progress.png" in text
    assert (out / "fast_p.png").stat().st_size > 5000 and (out / "progress.png").stat().st_size > 5000
    data = json.loads((out / "results.json").read_text())
    assert data["metrics"]["best-of-n"]["fast_p_curve"][0] == [0.0, 0.5]


def test_bench_tpu_offline_is_unmeasured_and_says_so(tmp_path):
    root = _suite(tmp_path, {"rms": RMS, "expsum": EXPSUM})
    out = tmp_path / "r"
    res = run_bench(BenchConfig(str(root), target="tpu", methods=("best-of-n",), scale="ci", samples=1, db=tmp_path / "t.duckdb",
                                out=out, lm="offline"))
    row = {r.task: r for r in res.rows}["rms"]
    assert row.correct and row.speedup is None and row.timing_note
    m = res.metrics["best-of-n"]
    assert m.speed == "unmeasured" and m.geomean_speedup is None and "no TPU device" in m.speed_note
    text = (out / "report.md").read_text()
    assert "not measured" in text and not (out / "fast_p.png").exists() and (out / "progress.png").exists()


def test_cli_json_declined_suite_and_errors(tmp_path, capsys):
    from mk.cli import main

    root = _suite(tmp_path, {"expsum": EXPSUM, "tanh2": TANH})
    rc = main(["bench", str(root), "--target", "cpu", "--lm", "offline", "--json", "--out", str(tmp_path / "o"),
               "--db", str(tmp_path / "c.duckdb")])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["metrics"]["auto"]["tasks"] == 2 and data["metrics"]["auto"]["correctness_rate"] == 0.0
    assert [t["status"] for t in data["tasks"]] == ["declined", "declined"]
    with pytest.raises(ConfigError, match="no task"):
        run_bench(BenchConfig(str(root), target="cpu", tasks=["nope"], db=tmp_path / "c2.duckdb"))
    with pytest.raises(ConfigError, match="unknown benchmark method"):
        run_bench(BenchConfig(str(root), target="cpu", methods=("greedy",), db=tmp_path / "c3.duckdb"))


def test_bench_search_mode_with_scripted_author(tmp_path):
    root = _suite(tmp_path, {"tanh2": TANH})
    res = run_bench(BenchConfig(str(root), target="cpu", methods=("search",), scale="ci", tune=False, db=tmp_path / "s.duckdb",
                                out=tmp_path / "o", author_factory=ScriptedAuthor,
                                search={"algorithm": "beam", "depth": 1, "width": 1, "branches": 2}))
    row = res.rows[0]
    assert row.method == "search" and row.run_id and row.candidates >= 1
    assert row.correct and row.compiled and row.speedup is not None
    assert all(s.depth == 1 for s in row.progress)
    assert res.metrics["search"].correct == 1


class SamplingAuthor(ScriptedAuthor):
    """A ScriptedAuthor with a ``rollout`` (like LMAuthor): records the rollout each plan and implement ran under."""

    def __init__(self):
        super().__init__()
        self.rollout = None
        self.seen = []

    def plan(self, ctx):
        self.seen.append(("plan", self.rollout))
        return super().plan(ctx)

    def implement(self, ctx, plan):
        self.seen.append(("implement", self.rollout))
        return super().implement(ctx, plan)


def test_best_of_n_draws_sample_i_as_rollout_i_and_restores_it(tmp_path):
    from types import SimpleNamespace

    from mk.bench.methods import MethodConfig, run_best_of_n
    from mk.loaders import load_task

    root = _suite(tmp_path, {"tanh2": TANH})
    task = load_task(str(root / "tanh2.py"))
    task = task.with_scales({"ci": task.scale("ci")})
    author = SamplingAuthor()
    author.rollout = 7
    judged = []

    def judge(task, candidate, **kw):
        judged.append(candidate.digest)
        return SimpleNamespace(status="correct", reason="", speedup=1.0, step=lambda name: None)

    row = run_best_of_n(task, author, MethodConfig(target="cpu", evaluate=judge, samples=2))
    assert row.candidates == 2 and len(set(judged)) == 2
    assert author.seen == [("plan", 1), ("implement", 1), ("plan", 2), ("implement", 2)]
    assert author.rollout == 7  # the caller's rollout is back


def test_best_of_n_with_an_author_without_rollouts_is_unchanged(tmp_path):
    from types import SimpleNamespace

    from mk.bench.methods import MethodConfig, run_best_of_n
    from mk.loaders import load_task

    root = _suite(tmp_path, {"tanh2": TANH})
    task = load_task(str(root / "tanh2.py"))
    author = ScriptedAuthor()
    judge = lambda task, candidate, **kw: SimpleNamespace(status="correct", reason="", speedup=1.0, step=lambda name: None)
    row = run_best_of_n(task.with_scales({"ci": task.scale("ci")}), author, MethodConfig(target="cpu", evaluate=judge, samples=2))
    assert row.candidates == 2 and not hasattr(author, "rollout")


def test_bench_interrupted_keeps_a_partial_report_and_an_unwritable_out_fails_first(tmp_path, monkeypatch):
    from mk.bench import runner
    from mk.bench.runner import BenchInterrupted

    root = _suite(tmp_path, {"tanh2": TANH, "expsum": EXPSUM})
    db, out = tmp_path / "b.duckdb", tmp_path / "report"
    real = runner.RUNNERS["auto"]
    calls = []

    def stop_on_second(task, author, mcfg):
        calls.append(task.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task, author, mcfg)

    monkeypatch.setitem(runner.RUNNERS, "auto", stop_on_second)
    with pytest.raises(BenchInterrupted) as info:
        run_bench(BenchConfig(str(root), target="cpu", methods=("auto",), scale="ci", iterations=3, tune=False, db=db,
                              out=out, author_factory=ScriptedAuthor))
    assert info.value.bench_id in str(info.value) and "partial report" in str(info.value)
    assert len(info.value.result.rows) == 1 and (out / "report.md").is_file()
    with Store.open(db) as store:
        assert store.query("SELECT status FROM bench_runs")[0]["status"] == "interrupted"
    blocked = tmp_path / "file"
    blocked.write_text("")
    calls.clear()
    with pytest.raises(ConfigError, match="cannot write to the output folder"):
        run_bench(BenchConfig(str(root), target="cpu", methods=("auto",), scale="ci", db=db, out=blocked / "sub",
                              author_factory=ScriptedAuthor))
    assert calls == []  # nothing ran


def test_the_cli_prints_each_re_timed_median_and_says_the_geomean_is_of_those():
    """`mk bench` printed 3.24x/3.03x per task and then a geomean of re-timed medians shown only in report.md: the
    re-timed line of each row is printed when the event comes, and the summary says which speedups it used."""
    from rich.console import Console

    from mk.bench.metrics import compute_metrics
    from mk.bench.results import BenchResult, TaskRow
    from mk.commands.bench import _Progress, _summary

    rows = [TaskRow("auto", "tanh2", "correct", compiled=True, correct=True, speedup=2.5, speedup_runs=[3.24, 2.5, 2.1],
                    spread=(2.1, 3.24), tied_with=["best-of-n"]),
            TaskRow("best-of-n", "tanh2", "correct", compiled=True, correct=True, speedup=2.4, speedup_runs=[3.03, 2.4, 2.2],
                    spread=(2.2, 3.03), tied_with=["auto"])]
    console = Console(record=True, width=200)
    _Progress(console).on_event("retimed", {"task": "tanh2", "rows": rows})
    printed = console.export_text()
    assert "re-timed      auto tanh2 2.50x (median of 3 runs, 2.10x-3.24x, tie with best-of-n)" in printed
    assert "re-timed best-of-n tanh2 2.40x (median of 3 runs, 2.20x-3.03x, tie with auto)" in printed
    result = BenchResult("b1", "suite", "cpu", "ci", ["auto", "best-of-n"], "scripted", True, "",
                         {m: compute_metrics([r.outcome()]) for m, r in zip(("auto", "best-of-n"), rows)}, rows)
    _summary(console, result)
    summary = console.export_text()
    assert "2.500x" in summary and "2.400x" in summary  # the geomeans of the medians printed above, not of 3.24/3.03
    assert "speedups: each task's re-timed median (the 're-timed' lines), not its first measurement" in summary
    plain = [TaskRow("auto", "tanh2", "correct", compiled=True, correct=True, speedup=2.5)]  # not re-timed: no such line
    _summary(console, BenchResult("b2", "suite", "cpu", "ci", ["auto"], "scripted", True, "",
                                  {"auto": compute_metrics([plain[0].outcome()])}, plain))
    assert "re-timed median" not in console.export_text()
