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


def test_a_proposal_counts_only_when_both_runs_judged_and_compiled_the_same_source():
    compiled = _compiled()
    for r in compiled["rows"]:
        for p in r["targets"]["tpu"]["proposals"]:
            p["digest"] = f"{p['name']}-v2"
    coverage = _coverage()
    coverage["rows"][0]["digests"] = {"fused": "fused-v2", "split": "split-v1"}  # split changed between the runs
    report = full_scale.join(coverage, compiled)
    cell = {r["task"]: r["chips"]["v6e"] for r in report["rows"]}["jaxbench:18k"]
    assert not cell["ok"] and cell["other_source"] == ["split"]
    assert "judged and compiled sources differ: split" in full_scale.render({**report, "date": "d", "command": "c",
                                                                              "coverage": {"command": "a", "date": "b"},
                                                                              "compile": {"command": "c", "date": "d",
                                                                                          "compilers": "e"}})
    coverage["rows"][0]["digests"]["split"] = "split-v2"
    report = full_scale.join(coverage, compiled)
    assert {r["task"]: r["chips"]["v6e"] for r in report["rows"]}["jaxbench:18k"]["ok"] and report["by_digest"]
    del coverage["rows"][0]["digests"]  # an older coverage run: joined by name, and the report says so
    report = full_scale.join(coverage, compiled)
    assert not report["by_digest"] and report["joined_by_name_only"] == 1


def test_an_example_is_joined_by_its_task_name_not_its_file_stem():
    compiled = {"chips": {"tpu": ["v6e"]}, "rows": [{"task": "examples:attention", "targets": {"tpu": {"proposals": [
        {"name": "flash", "chips": {"v6e": {"ok": True, "kernels": []}}}]}}}]}
    coverage = {"rows": [{"suite": "examples", "task": "causal_attention", "target": "tpu", "covered": True,
                          "best": "flash", "judged": {"flash": "correct"}}]}
    (row,) = full_scale.join(coverage, compiled)["rows"]
    assert row["chips"]["v6e"]["ok"] and row["chips"]["v6e"]["judged"]
