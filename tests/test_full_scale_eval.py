"""evals/full_scale.py without judging or compiling: a task counts on a chip only when one proposal is both judged
correct (coverage.json) and compiled at full for that chip (full_compile.json); the best correct proposal failing
to compile does not hide another correct one that compiles; an old row without per-proposal verdicts counts its best
only; a task the coverage run did not judge is said to be so."""

import json

from evals import full_scale


def _compiled():
    ok = {"ok": True, "kernels": [{"name": "k", "kind": "pallas", "scoped_vmem_bytes": 2 ** 20}]}
    bad = {"ok": False, "stage": "compile", "error": "RESOURCE_EXHAUSTED"}
    return {"command": "python -m evals.full_compile", "date": "d1", "compilers": "libtpu", "chips": {"tpu": ["v6e"]},
            "rows": [{"task": f"jaxbench:{t}", "targets": {"tpu": {"proposals": [
                {"name": "fused", "chips": {"v6e": bad}}, {"name": "split", "chips": {"v6e": ok}}]}}}
                for t in ("18k", "22k", "25k")]}


def _coverage():
    row = {"suite": "jaxbench", "target": "tpu", "covered": True, "status": "correct", "best": "fused"}
    return {"command": "python -m evals.coverage", "date": "d0", "rows": [
        {**row, "task": "18k", "judged": {"fused": "correct", "split": "correct"}},
        {**row, "task": "22k"}]}  # written before rows recorded every verdict: its best only


def test_a_task_counts_when_one_proposal_is_correct_and_compiles(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(_coverage()))
    (tmp_path / "f.json").write_text(json.dumps(_compiled()))
    assert full_scale.main(["--coverage", str(tmp_path / "c.json"), "--compile", str(tmp_path / "f.json"),
                            "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "full_scale.json").read_text())
    cells = {r["task"]: r["chips"]["v6e"] for r in data["rows"]}
    assert cells["jaxbench:18k"]["ok"] and cells["jaxbench:18k"]["proposals"] == ["split"]
    assert not cells["jaxbench:22k"]["ok"] and cells["jaxbench:22k"]["correct"] == ["fused"]
    assert not cells["jaxbench:25k"]["ok"] and not cells["jaxbench:25k"]["judged"]
    md = (tmp_path / "full_scale.md").read_text()
    assert "jaxbench: v6e 1/3" in md and "| jaxbench:18k | ✓ split (1.0 MiB VMEM) |" in md
    assert "| jaxbench:22k | ✗ correct: fused; compiled at full: split |" in md and "| jaxbench:25k | not judged |" in md
    assert "`python -m evals.coverage` (d0)" in md and "`python -m evals.full_compile` (d1; libtpu)" in md
