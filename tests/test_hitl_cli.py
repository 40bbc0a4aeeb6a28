"""`mk hitl`: driven with a fake stdin in-process, through $EDITOR, and as a real subprocess over pipes."""

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from mk.cli import main
from mk.store import Store

ROOT = Path(__file__).resolve().parents[1]
TASK = str(ROOT / "tests" / "fixtures" / "small" / "rmsnorm.py")  # the example with a small full size
PURE_JAX = (
    "import jax\nimport jax.numpy as jnp\n\n"
    "def kernel(x, weight, eps):\n"
    "    x32 = x.astype(jnp.float32)\n"
    "    inv = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)\n"
    "    return (x32 * inv * weight).astype(x.dtype)\n"
)


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def _args(tmp_path, *extra):
    return ["hitl", TASK, "--target", "tpu", "--scale", "ci", "--trials", "1", "--iterations", "2",
            "--db", str(tmp_path / "h.duckdb"), "--out", str(tmp_path / "out"), *extra]


def test_fake_stdin_edit_plan_and_code_quit_then_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("EDITOR", raising=False)
    answers = ("e\nmy own plan: whole rows per block\n.\n"  # edit the plan
               "a\n"  # implement: the offline author cannot follow free text and says so
               f"e\n{PURE_JAX}.\n"  # so the person writes the code: a pure-JAX version
               "a\n"  # validate: the tpu judge requires a Pallas kernel
               "q\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO(answers))
    assert main(_args(tmp_path)) == 0  # a quit, with no correct kernel yet, is not a failure
    out = capsys.readouterr().out
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())  # panel text, unwrapped
    assert "plan replaced" in out and "cannot follow a free-text plan" in flat
    assert "edit: ok" in out and "validate: failed" in out and "rejected" in out
    run_id = re.search(r"mk hitl --resume (\w+)", out).group(1)
    with Store.open(tmp_path / "h.duckdb") as store:
        assert store.get_run(run_id)["mode"] == "hitl"
        (node,) = store.nodes(run_id)
        assert node["plan"].startswith("my own plan") and node["code"] == PURE_JAX

    # resume: nothing was snapshotted, so it plans again; approving every phase ends with a correct kernel
    monkeypatch.setattr(sys, "stdin", io.StringIO("a\n" * 12))
    assert main(["hitl", "--resume", run_id, "--db", str(tmp_path / "h.duckdb"), "--out", str(tmp_path / "out"), "--trials", "1"]) == 0
    out = capsys.readouterr().out
    assert f"resumed run {run_id}" in out and "test: ok" in out and "snapshot: ok" in out
    kernel = tmp_path / "out" / "rmsnorm_tpu.py"
    assert kernel.exists() and "verdict: correct" in kernel.read_text()


def test_edit_through_editor_on_a_tty(tmp_path, monkeypatch, capsys):
    script = tmp_path / "editor.py"
    script.write_text("import sys\np = sys.argv[1]\nopen(p, 'a').write(' -- edited in the editor')\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
    monkeypatch.setattr(sys, "stdin", FakeTTY("e\na\na\nq\n"))  # edit the plan in $EDITOR, implement it, snapshot, quit
    assert main(_args(tmp_path)) == 0  # quit
    out = capsys.readouterr().out
    # the offline author writes only its own kernels: a note it cannot act on is refused with the names it can follow
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())  # panel text, unwrapped
    assert "plan replaced" in out and "implement: failed" in out and "cannot follow a free-text plan" in flat
    assert "rowwise-tpu" in flat
    with Store.open(tmp_path / "h.duckdb") as store:
        (run,) = store.list_runs()
        assert not store.nodes(run["id"])  # nothing was written for a plan that was refused
        (snap,) = store.snapshots(run["id"])
        assert snap["plan"].endswith(" -- edited in the editor") and snap["status"] == "rejected"


class Scripted(io.StringIO):
    """stdin whose answers may be callables, run when the answer is read (a person editing a file, then Enter)."""

    def __init__(self, answers):
        super().__init__()
        self.answers = list(answers)

    def readline(self, *_):
        if not self.answers:
            return ""
        answer = self.answers.pop(0)
        return answer() if callable(answer) else answer


def test_edit_a_file_without_an_editor_the_prompt_names_or_by_path(tmp_path, monkeypatch, capsys):
    """Without $EDITOR the `e` key no longer makes the person retype the kernel: the prompt names a file holding the
    current plan/code (edit it with anything, press Enter), or takes the path of a file holding the new text."""
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.delenv("VISUAL", raising=False)
    mine = tmp_path / "mine.py"
    mine.write_text(PURE_JAX)
    seen = []

    def edit_the_named_file():
        out = capsys.readouterr().out
        seen.append(out)
        named = Path(re.search(r"the current plan is in (\S+): edit it", out).group(1))
        assert "row-wise fusion" in named.read_text()  # it holds the current plan
        named.write_text("use rowwise-tpu -- edited in my own editor")
        return "\n"

    answers = ["e\n", edit_the_named_file,  # the plan, edited in the file the prompt names
               "a\n",  # implement it
               "e\n", f"{mine}\n",  # the code, from a file given by its path
               "q\n"]
    monkeypatch.setattr(sys, "stdin", Scripted(answers))
    assert main(_args(tmp_path)) == 0  # quit
    out = "".join(seen) + capsys.readouterr().out
    assert "plan replaced" in out and "implement: ok" in out and "edit: ok" in out
    with Store.open(tmp_path / "h.duckdb") as store:
        (run,) = store.list_runs()
        nodes = store.nodes(run["id"])
        assert nodes[-1]["code"] == PURE_JAX and nodes[-1]["plan"].startswith("use rowwise-tpu -- edited in my own editor")


def test_an_edited_plan_naming_a_proposal_is_honoured(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO("e\nuse rowwise-tpu, please\n.\na\nq\n"))
    assert main(_args(tmp_path)) == 0  # quit
    out = capsys.readouterr().out
    assert "plan replaced" in out and "implement: ok" in out


def test_subprocess_over_pipes(tmp_path):
    env = {**os.environ, "MK_DB": str(tmp_path / "p.duckdb"), "JAX_PLATFORMS": "cpu"}
    env.pop("EDITOR", None)
    # one iteration: approve the plan, redo validate, then approve every phase to the snapshot (the run ends correct;
    # with more iterations the input would run out at the next plan and the run would end interrupted)
    proc = subprocess.run([sys.executable, "-m", "mk", *_args(tmp_path)[:-4], "--out", str(tmp_path / "out"),
                           "--iterations", "1"],
                          input="a\nr\n" + "a\n" * 12, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "running implement again" in proc.stdout and "snapshot: ok" in proc.stdout
    assert (tmp_path / "out" / "rmsnorm_tpu.py").exists()
    with Store.open(tmp_path / "p.duckdb") as store:
        (run,) = store.list_runs()
        assert run["mode"] == "hitl" and run["status"] == "correct"


def test_optimize_mode_hitl_json_prints_the_same_summary_as_auto(tmp_path):
    """`mk optimize --mode hitl --json` ends with one JSON summary on stdout, with the keys auto's has."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("EDITOR", None)
    printed = {}
    for mode in ("auto", "hitl"):
        proc = subprocess.run([sys.executable, "-m", "mk", "optimize", TASK, "--mode", mode, "--json", "--lm", "offline",
                               "--target", "cpu", "--scale", "ci", "--db", str(tmp_path / f"{mode}.duckdb"),
                               "--out", str(tmp_path / mode), "--budget-time", "0"],
                              input="a\n" * 8, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # the session itself went to stderr
        printed[mode] = json.loads(lines[0])
        assert proc.returncode == 1  # the budget stopped it before a correct kernel
    assert printed["hitl"].keys() == printed["auto"].keys()
    assert printed["hitl"]["mode"] == "hitl" and printed["auto"]["mode"] == "auto"
    report = json.loads(Path(printed["hitl"]["report_path"]).read_text())
    assert report["run_id"] == printed["hitl"]["run_id"] and report["stop_reason"] == printed["hitl"]["stop_reason"]
