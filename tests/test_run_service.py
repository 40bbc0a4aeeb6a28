"""The run service (mk/run): one RunConfig stored with every run, one rule for "best", one stop reason on every
surface, and reopening a run with its exact scales, synthesised cases and a suite-hash check."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import tanh2_module

from mk.budget import Budget
from mk.errors import ConfigError, TaskError, TargetError
from mk.harness.suite import Case
from mk.run import Run, RunConfig, best_of
from mk.authors import build_author
from mk.run.config import author_fields
from mk.store import Store

EXAMPLE = Path(__file__).resolve().parent / "fixtures" / "small" / "softmax.py"  # the example with a small full size

SIZES = {"ci": (16, 128), "big": (64, 256)}  # tanh2 (tests/fakes.py) at two sizes


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "tanh2_task.py"
    path.write_text(tanh2_module(SIZES, factor="2.0"))
    return path


def _ci(path):
    from mk.loaders import load_task

    full = load_task(path)
    return full.with_scales({"ci": full.scale("ci")})


# --- RunConfig ---------------------------------------------------------------------------------
def test_run_config_round_trips_and_reads_earlier_shapes():
    cfg = RunConfig(mode="search", target="gpu", locator={"kind": "module", "path": "/x.py", "id": "x"}, scales=("ci",),
                    author="offline", budget=Budget(max_wall_s=5.0), settings={"algorithm": "beam", "width": 3}, out="o")
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.budget.max_wall_s == 5.0 and again.scales == ("ci",)
    # a search run stored by an earlier version: task_locator, search at the top level, the target inside it
    old = RunConfig.from_dict({"search": {"algorithm": "greedy", "target": "cpu"}, "task_locator": {"kind": "builtin", "id": "x"},
                               "author": "offline", "suite_hash": "abc"}, mode="search")
    assert (old.target, old.settings["algorithm"], old.locator["kind"], old.suite_hash) == ("cpu", "greedy", "builtin", "abc")
    with pytest.raises(ConfigError, match="unknown run mode"):
        RunConfig(mode="nope")
    with pytest.raises(TargetError):
        RunConfig(mode="auto", target="fpga")


def test_author_specs_rebuild_or_say_why_not():
    from mk.author.adapter import OfflineAuthorAdapter

    assert author_fields(OfflineAuthorAdapter()) == {"author": "offline", "author_name": "offline"}

    class Local:
        name = "mine"

    assert author_fields(Local()) == {"author": "", "author_name": "mine"}
    with pytest.raises(ConfigError, match="'mine' cannot be rebuilt"):
        build_author("", name="mine")
    assert build_author("offline").name == "offline"


# --- best ---------------------------------------------------------------------------------------
def test_best_is_the_fastest_measured_correct_else_the_first_correct():
    rows = [{"status": "incorrect", "speedup": 9.0}, {"status": "correct", "speedup": None}, {"status": "correct", "speedup": 1.5},
            {"status": "correct", "speedup": 2.5}, {"status": "correct", "speedup": 2.5, "late": True}]
    assert best_of(rows) is rows[3]  # ties keep the earlier one
    unmeasured = [{"status": "rejected", "speedup": None}, {"status": "correct", "speedup": None, "k": 1},
                  {"status": "correct", "speedup": None, "k": 2}]
    assert best_of(unmeasured)["k"] == 1
    assert best_of([{"status": "incorrect", "speedup": 3.0}]) is None and best_of([]) is None


# --- Run -----------------------------------------------------------------------------------------
from mk.contracts import Author  # noqa: E402


class _Synthesizer(Author):
    """An author whose prepare() adds a synthesised case at a new shape (as the LM test synthesizer does)."""

    name = "synth"

    def prepare(self, task, target):
        from mk.task import Scale

        extra = Scale("syn_tall", shapes=((48, 128),))
        return task.with_scales({**task.scales, "syn_tall": extra}), [Case("syn_tall", 7, "normal", note="synthesized: tall")]


def test_reopen_rebuilds_the_same_suite_with_its_synthesised_cases_and_refuses_a_changed_one(task_file, tmp_path):
    db = tmp_path / "r.duckdb"
    with Store.open(db) as store:
        run = Run.create(store, _ci(task_file), RunConfig(mode="auto", target="cpu", author="offline"))
        task, suite = run.freeze(_Synthesizer())
        assert "syn_tall" in task.scales and any(c.scale == "syn_tall" for c in suite.cases)
        stored = RunConfig.from_dict(store.get_run(run.id)["config"], mode="auto")
        assert stored.suite_hash == suite.hash and stored.scales == ("ci",) and stored.synthesized["cases"]
    with Store.open(db) as store:  # another session: no model, the same suite from the stored config
        again = Run.reopen(store, run.id[:10])
        assert again.id == run.id and again.suite.hash == suite.hash and set(again.task.scales) >= {"ci", "syn_tall"}
        assert "big" not in again.task.scales  # exactly the run's scales, not the task's full set
        assert again.resume_command() == f"mk resume {run.id} --db {db}"
    task_file.write_text(tanh2_module(SIZES, factor="3.0"))  # the reference changed, so its frozen suite did
    with Store.open(db) as store, pytest.raises(TaskError, match="frozen suite changed"):
        Run.reopen(store, run.id)


def test_a_run_of_a_python_function_cannot_be_reopened_elsewhere(tmp_path):
    import jax
    import jax.numpy as jnp

    from mk.loaders.callable import task_from_callable

    task = task_from_callable(lambda x: jnp.sin(x), [jax.ShapeDtypeStruct((8, 128), jnp.float32)], name="sinf")
    with Store.open(tmp_path / "c.duckdb") as store:
        run = Run.create(store, task, RunConfig(mode="auto", target="cpu"))
        with pytest.raises(TaskError, match="Python function"):
            Run.reopen(store, run.id)


# --- one stop reason on every surface, through the real CLI ----------------------------------------
def _mk(*args, stdin=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "mk", *args], capture_output=True, text=True, timeout=timeout, input=stdin)


def test_every_mode_says_a_spent_budget_in_the_same_words_with_its_resume_command(tmp_path):
    """auto, search, HITL and bench: which budget, how much was spent, said once, and the exact command that continues
    the run with a new budget of that kind (built by mk.run.stop.budget_stop_reason)."""
    import re

    reasons = {}
    for mode in ("auto", "search", "hitl"):
        db = str(tmp_path / f"{mode}.duckdb")
        proc = _mk("optimize", str(EXAMPLE), "--lm", "offline", "--target", "cpu", "--scale", "ci", "--db", db,
                   "--out", str(tmp_path / mode), "--budget-time", "0.01", "--mode", mode, "--workers", "inline", "--json",
                   stdin="a\n" * 8, timeout=300)
        printed = json.loads(proc.stdout.strip().splitlines()[-1])
        reason = reasons[mode] = printed["stop_reason"]
        resume = "mk hitl --resume" if mode == "hitl" else "mk resume"
        assert re.match(r"budget spent: wall-time budget, \d+\.\d s of 0\.01 s; ", reason), reason
        assert reason.count("budget spent") == 1, reason
        assert f"continue with a new budget: {resume} {printed['run_id']} --db {db} --budget-time 0.01" in reason, reason
    bench = tmp_path / "bench"
    _mk("bench", str(EXAMPLE), "--lm", "offline", "--target", "cpu", "--db", str(tmp_path / "b.duckdb"), "--out", str(bench),
        "--no-plots", "--budget-time", "0", "--json", timeout=300)
    results = json.loads((bench / "results.json").read_text())
    stop = results["stop_reason"]
    assert stop.startswith("budget spent: wall-time budget, ") and stop.count("budget spent") == 1, stop
    assert stop.endswith(f"mk bench --resume {results['bench_id']} --db {tmp_path / 'b.duckdb'} --budget-time SECONDS"), stop
    (row,) = results["tasks"]
    assert row["reason"].startswith("not run: budget spent: wall-time budget, ") and row["reason"].count("budget spent") == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "search", "hitl"])
def test_a_spent_budget_is_the_same_stop_reason_everywhere(tmp_path, mode):
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    args = ["optimize", str(EXAMPLE), "--lm", "offline", "--target", "cpu", "--scale", "ci", "--db", db, "--out", out,
            "--budget-time", "0", "--mode", mode]
    if mode == "search":
        args += ["--workers", "inline"]
    if mode != "hitl":
        args.append("--json")
    proc = _mk(*args, stdin="a\n" * 20 if mode == "hitl" else None)
    reports = list(Path(out).glob("*.report.json"))
    assert len(reports) == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    report = json.loads(reports[0].read_text())
    assert report["mode"] == mode and report["stop_reason"].startswith("budget spent: wall-time budget, ")
    assert "no rule applies" not in report["stop_reason"]
    if mode != "hitl":
        printed = json.loads(proc.stdout.strip().splitlines()[-1])
        assert printed["stop_reason"] == report["stop_reason"] and printed["run_id"] == report["run_id"]
    shown = json.loads(_mk("show", report["run_id"], "--db", db, "--json").stdout)
    assert shown["run"]["reason"] == report["stop_reason"], (shown["run"], report["stop_reason"])
    stored = shown["run"]["config"]
    assert stored["mode"] == mode and stored["scales"] == ["ci"] and stored["budget"]["max_wall_s"] == 0.0


@pytest.mark.slow
def test_a_spent_budget_stops_a_bench_and_every_surface_says_so(tmp_path):
    db, out = str(tmp_path / "db.duckdb"), tmp_path / "bench"
    proc = _mk("bench", str(EXAMPLE), "--lm", "offline", "--target", "cpu", "--db", db, "--out", str(out), "--no-plots",
               "--budget-time", "0", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    (row,) = printed["tasks"]
    assert row["status"] == "skipped" and "budget spent" in row["reason"] and "wall-time budget" in row["reason"]
    results = json.loads((out / "results.json").read_text())
    assert results["stop_reason"].startswith("budget spent: wall-time budget") and "1 task runs skipped" in results["stop_reason"]
    assert "budget spent" in (out / "report.md").read_text()
    text = _mk("bench", str(EXAMPLE), "--lm", "offline", "--target", "cpu", "--db", db, "--out", str(tmp_path / "b2"),
               "--no-plots", "--budget-time", "0")
    assert "bench id:" in text.stdout and "budget spent" in text.stdout  # the summary is the command's output (stdout)


def test_an_lm_search_without_a_device_stops_once_a_kernel_is_correct_unless_told_to_explore():
    from types import SimpleNamespace

    from mk.programs.search import Search, SearchConfig

    class NoDevice:
        name = "lm:fake"
        explore_without_device = False

        def device_notice(self, target):
            return f"no {target} device here"

    done = {"n0": SimpleNamespace(status="incorrect"), "n1": SimpleNamespace(status="correct")}
    cfg = SearchConfig(target="tpu", workers="inline")
    author = NoDevice()
    assert "stopped after the first level with a correct kernel" in Search(author, config=cfg)._no_device_stop(cfg, done)
    assert Search(author, config=cfg)._no_device_stop(cfg, {"n0": done["n0"]}) is None  # nothing correct yet: go on
    author.explore_without_device = True  # --explore
    assert Search(author, config=cfg)._no_device_stop(cfg, done) is None
    assert Search("offline", config=cfg)._no_device_stop(cfg, done) is None  # the offline author spends nothing


def test_explore_is_stored_with_the_run_and_given_back_to_the_rebuilt_author(tmp_path):
    cfg = RunConfig(mode="auto", explore=True, author="offline")
    assert RunConfig.from_dict(cfg.to_dict()).explore is True
    assert RunConfig.from_dict({"target": "tpu"}).explore is False


# --- the author contract ------------------------------------------------------------------------
def test_one_author_contract_with_defaults_for_the_optional_hooks(task_file, tmp_path):
    from mk.author.adapter import OfflineAuthorAdapter
    from mk.author.proposal import Proposal
    from mk.contracts import Author, as_author
    from mk.programs.auto import Auto, Plan
    from mk.programs.lm_author import LMAuthor

    assert issubclass(OfflineAuthorAdapter, Author) and issubclass(LMAuthor, Author)

    class Minimal(Author):  # only what is required
        name = "minimal"

        def __init__(self):
            self.left = ["one"]

        def plan(self, ctx):
            return Plan(self.left.pop(), "scale the tanh") if self.left else None

        def implement(self, ctx, plan):
            return Proposal(plan.name, "import jax.numpy as jnp\n\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n", plan.text, "t")

    traj = Auto(Minimal(), target="cpu", iterations=2, tune=False).run(_ci(task_file))
    assert traj.best is not None and "no further proposals" in traj.stop_reason

    class Duck:  # a plain object: adapted, defaults for the rest
        name = "duck"
        declined = {"rule": "why not"}

        def plan(self, ctx):
            return None

        def implement(self, ctx, plan):
            raise AssertionError

    a = as_author(Duck())
    assert isinstance(a, Author) and a.name == "duck" and a.declined == {"rule": "why not"}
    assert a.fix(None, None, "e") is None and a.analyse(None, None) == "" and a.stop_reason == "" and a.spend() == {}
    assert a.prepare("task", "cpu") == ("task", []) and as_author(a) is a
    assert not hasattr(a, "rollout")  # what the author does not have is not invented
    with pytest.raises(ConfigError, match="no implement"):
        as_author(type("Half", (), {"plan": lambda self, ctx: None})())


# --- plug-in points ---------------------------------------------------------------------------------
def test_targets_are_a_registry_and_say_what_they_need():
    from mk.targets import Target, _TARGETS, get_target, register_target, target_names

    tpu, gpu, cpu = (get_target(n) for n in ("tpu", "gpu", "cpu"))
    assert (tpu.needs_kernel, gpu.needs_kernel, cpu.needs_kernel) == (True, True, False)
    assert (tpu.kernel_language, gpu.kernel_language) == ("mosaic", "triton") and tpu.assumes_chip and not gpu.assumes_chip
    assert cpu.host and not tpu.host and get_target(tpu) is tpu
    try:
        register_target(Target("gpu-rocm", platform="rocm", device_platform="gpu", kernel_language="triton"))
        assert "gpu-rocm" in target_names() and get_target("gpu-rocm").platform == "rocm"
        from mk.cli import build_parser

        help_text = build_parser()._subparsers._group_actions[0].choices["optimize"].format_help()
        assert "gpu-rocm" in help_text  # the CLI's --target choices read the registry
    finally:
        _TARGETS.pop("gpu-rocm", None)
    with pytest.raises(TargetError, match="unknown target"):
        get_target("fpga")


def test_search_algorithms_are_a_registry():
    from mk.programs.search import SearchConfig
    from mk.programs.search_algorithms import ALGORITHMS

    assert set(ALGORITHMS) == {"beam", "parallel", "greedy", "evolve"}
    for name in ALGORITHMS:
        SearchConfig(algorithm=name)  # each is accepted by the config check that reads the registry


def test_a_budget_spent_during_tuning_keeps_the_verified_kernel(task_file):
    """The budget runs out in the middle of autotuning: tuning stops between trials and the kernel that passed the
    whole suite is kept (its verified default config), not thrown away."""
    from mk.author.proposal import Proposal
    from mk.contracts import Author
    from mk.budget import BudgetMeter
    from mk.harness.results import EvalResult
    from mk.programs.auto import Auto, Plan

    clock = [0.0]
    meter = BudgetMeter(Budget(max_wall_s=10.0), clock=lambda: clock[0])
    trials = []

    def judge(task, candidate, *, target, suite, config, measure=True, **kw):
        if config:
            trials.append(config)
            clock[0] += 6.0  # each tuning trial takes 6 s of the 10 s budget
        return EvalResult(status="correct", reason="all cases pass", task=task.name, target=target)

    class One(Author):
        name = "one"
        done = False

        def plan(self, ctx):
            if self.done:
                return None
            self.done = True
            return Plan("tiled", "tile the rows")

        def implement(self, ctx, plan):
            src = ("import jax.numpy as jnp\n\nCONFIG_SPACE = {'block': [8, 16, 32, 64]}\n\n"
                   "def kernel(x, block=8):\n    return jnp.tanh(x) * 2.0\n")
            return Proposal(plan.name, src, plan.text, "t")

    traj = Auto(One(), target="cpu", iterations=3, evaluate=judge, budget=meter, max_trials=4).run(_ci(task_file))
    assert len(trials) == 2  # stopped between trials once the budget was spent, not after all four
    (snap,) = traj.snapshots
    assert snap.status == "correct" and traj.best is snap and snap.config == {}
    assert traj.stop_reason.startswith("budget spent: wall-time budget, ") and "best: tiled" in traj.stop_reason
    assert traj.stop_reason.count("budget spent") == 1


def test_runs_and_show_work_while_another_process_writes(tmp_path):
    """DuckDB lets one process hold the file; the writer keeps a small progress file per run that the read
    commands show instead of failing."""
    import time as _time

    db = tmp_path / "busy.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from mk.store import Store
with Store.open({str(db)!r}) as s:
    rid = s.create_run(None, "auto", {{"target": "cpu"}})
    s.add_snapshot(rid, None, 1, code="x", status="correct", speedup=1.5)
    s.finish_run(rid, "correct", "ran the maximum of 1 iterations")
    print(rid, flush=True)
    time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        rid = holder.stdout.readline().strip()
        assert rid, "the writer did not start"
        listed = _mk("runs", "--db", str(db), "--json")
        assert listed.returncode == 0, listed.stderr[-1500:]
        (row,) = json.loads(listed.stdout)
        assert row["id"] == rid and row["status"] == "correct" and row["snapshots"] == 1
        assert "in use by another mk process" in listed.stderr
        shown = _mk("show", rid[:10], "--db", str(db))
        assert shown.returncode == 0 and "ran the maximum of 1 iterations" in shown.stdout, shown.stderr[-1500:]
    finally:
        holder.kill()
        holder.wait()
    _time.sleep(0.2)
    with Store.open(db) as store:  # the store itself is the record once it is free
        assert store.get_run(rid)["status"] == "correct"


def test_the_wall_time_spent_is_counted_from_the_runs_started_at(tmp_path):
    """--budget-time: the spend a stop reason gives is the wall clock between the run's recorded started_at and its stop
    (the meter starts at the run's start, not at the command's start: author, store and imports before it are not the
    run's time)."""
    import re
    from datetime import datetime

    for mode in ("auto", "search", "hitl"):
        db = str(tmp_path / f"{mode}.duckdb")
        proc = _mk("optimize", str(EXAMPLE), "--lm", "offline", "--target", "cpu", "--scale", "ci", "--db", db,
                   "--out", str(tmp_path / mode), "--budget-time", "0.01", "--mode", mode, "--workers", "inline", "--json",
                   stdin="a\n" * 8, timeout=300)
        printed = json.loads(proc.stdout.strip().splitlines()[-1])
        spent = float(re.match(r"budget spent: wall-time budget, (\d+\.\d) s", printed["stop_reason"]).group(1))
        run = json.loads(_mk("show", printed["run_id"], "--db", db, "--json").stdout)["run"]
        elapsed = (datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])).total_seconds()
        assert elapsed - 0.5 <= spent <= elapsed + 0.05, (mode, spent, elapsed)  # shown to 0.1 s
