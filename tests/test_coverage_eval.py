"""evals/coverage.py without judging: merging another run's results (other targets judged in parallel, or tasks
re-judged later) replaces the same (suite, task, target) rows, recounts the totals from the rows, unions the targets
and lists each merge with its command."""

import json

from evals import coverage


def _run(targets, rows, command):
    return {"command": command, "date": "2026-12-03 19:00 UTC", "seconds": 12.0, "mk_version": "0", "targets": targets,
            "rows": [{"suite": "jaxbench", "task": t, "target": tg, "covered": ok, "status": "correct" if ok else "declined",
                      "candidates": 1, "best": f"k-{tg}" if ok else "", "compiled": ok, "reason": "", "seconds": 1.0}
                     for t, tg, ok in rows],
            "totals": {}}


def test_merge_from_other_targets_and_rejudged_tasks(tmp_path):
    base = _run(["tpu"], [("1p", "tpu", True), ("7p", "tpu", False)], "python -m evals.coverage --targets tpu")
    (tmp_path / "coverage.json").write_text(json.dumps(base))
    other = tmp_path / "gpu.json"
    other.write_text(json.dumps(_run(["gpu"], [("1p", "gpu", True), ("7p", "gpu", False)],
                                     "python -m evals.coverage --targets gpu")))
    again = tmp_path / "again.json"
    again.write_text(json.dumps(_run(["tpu", "gpu"], [("7p", "tpu", True), ("7p", "gpu", True)],
                                     "python -m evals.coverage --tasks 7p")))
    assert coverage.main(["--out", str(tmp_path), "--merge-from", str(other), "--merge-from", str(again)]) == 0
    data = json.loads((tmp_path / "coverage.json").read_text())
    assert data["targets"] == ["tpu", "gpu"] and len(data["rows"]) == 4
    assert data["totals"] == {"tpu": {"tasks": 2, "covered": 2, "compiled": 2}, "gpu": {"tasks": 2, "covered": 2, "compiled": 2}}
    md = (tmp_path / "coverage.md").read_text()
    assert "| jaxbench | 7p | ✓ k-tpu | ✓ k-gpu |" in md
    assert "Merged from a run of `python -m evals.coverage --targets gpu`" in md
    assert "`python -m evals.coverage --tasks 7p`" in md and md.index("--targets gpu`") < md.index("--tasks 7p`")
