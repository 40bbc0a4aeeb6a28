"""Full-scale coverage per chip: a kernel the judge found correct *and* the chip's compiler accepts at the task's own
size. Judges nothing and compiles nothing: it joins two recorded runs.

    python -m evals.full_scale                       # evals/results/coverage.json + full_compile.json
    python -m evals.full_scale --coverage A.json --compile B.json --out /tmp/fs

- ``coverage.json`` (``python -m evals.coverage``): each offline-author proposal judged at ``ci`` in interpret mode on
  this machine's CPU, held-out and fresh sizes included (rows record every proposal's verdict under ``judged``; rows
  written before that have only their best correct proposal);
- ``full_compile.json`` (``python -m evals.full_compile``): each proposal written at ``ci``, exported at ``full`` and
  compiled for each chip by the chip's own compiler without the chip.

A task counts on a chip when one proposal is in both: judged ``correct`` on the chip's target and compiled at full
for that chip. Nothing here ran on a TPU or GPU. Written to ``full_scale.{json,md}`` with both runs' commands and
dates.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def correct_proposals(row: dict[str, Any] | None) -> set[str]:
    """The proposals a coverage row found correct: every one under ``judged``, else its best when covered."""
    if row is None:
        return set()
    judged = row.get("judged")
    if judged:
        return {name for name, status in judged.items() if status == "correct"}
    return {row["best"]} if row.get("covered") and row.get("best") else set()


def task_name(row: dict[str, Any]) -> str:
    """The task's own name, as coverage rows key it: an example row of full_compile is keyed by its file's stem
    (``examples:attention``) while the task inside is named otherwise (``causal_attention``)."""
    suite, _, task = row["task"].partition(":")
    if row.get("name"):
        return str(row["name"])
    if suite == "examples":
        from evals.full_compile import EXAMPLES
        from mk.loaders import load_task

        return load_task(EXAMPLES / f"{task}.py").name
    return task


def join(coverage: dict[str, Any], compiled: dict[str, Any]) -> dict[str, Any]:
    """One row per task of ``compiled``: per chip, the proposals correct and compiled at full, and why not. Where
    both runs recorded each proposal's source digest, a proposal counts only when the two are the same code (a
    mismatch is listed under ``other_source``); ``by_digest`` says whether every joined pair was checked so."""
    by_key = {(r["suite"], r["task"], r["target"]): r for r in coverage["rows"]}
    chips = {chip: target for target, cs in compiled["chips"].items() for chip in cs}
    rows, unchecked = [], 0
    for r in compiled["rows"]:
        suite = r["task"].partition(":")[0]
        cells: dict[str, Any] = {}
        for chip, target in chips.items():
            cov = by_key.get((suite, task_name(r), target))
            good = correct_proposals(cov)
            digests = (cov or {}).get("digests") or {}
            proposals = r.get("targets", {}).get(target, {}).get("proposals", [])
            ok = {p["name"]: p for p in proposals if p["chips"].get(chip, {}).get("ok")}
            same = {name: None if not (digests.get(name) and p.get("digest")) else digests[name] == p["digest"]
                    for name, p in ok.items() if name in good}
            both = [name for name, equal in same.items() if equal is not False]
            unchecked += sum(1 for name in both if same[name] is None)
            cells[chip] = {"ok": bool(both), "proposals": both,
                           "kernels": ok[both[0]]["chips"][chip].get("kernels", []) if both else [],
                           "judged": cov is not None, "correct": sorted(good), "compiled": sorted(ok),
                           "other_source": sorted(name for name, equal in same.items() if equal is False)}
        rows.append({"task": r["task"], "chips": cells})
    return {"rows": rows, "chips": list(chips), "by_digest": unchecked == 0, "joined_by_name_only": unchecked}


def render(report: dict[str, Any]) -> str:
    from evals.full_compile import _figure

    chips = report["chips"]
    lines = [f"# Full-scale coverage per chip ({report['date']})", "",
             f"Command: `{report['command']}`", "",
             "A task counts on a chip when one offline-author proposal was judged **correct** at `ci` (interpret mode "
             "on a CPU, held-out and fresh sizes included) and **compiled at `full`** for that chip by its own "
             "compiler, without the chip. Nothing ran on a TPU or GPU: no speed is claimed.", "",
             f"- Correctness: `{report['coverage']['command']}` ({report['coverage']['date']})"
             + "".join(f"; re-judged by `{m['command']}` ({m['date']})" for m in report["coverage"].get("merged") or []),
             f"- Compiles: `{report['compile']['command']}` ({report['compile']['date']}; {report['compile']['compilers']})",
             "- " + ("Each joined proposal is the same source in both runs (its digest)." if report.get("by_digest") else
                     f"{report.get('joined_by_name_only', 0)} joined proposal(s) by name only: a run did not record "
                     "the source it judged or compiled, so that they are the same code is not checked here."),
             ""]
    for suite in dict.fromkeys(r["task"].partition(":")[0] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["task"].partition(":")[0] == suite]
        lines.append(f"{suite}: " + ", ".join(
            f"{c} {sum(r['chips'][c]['ok'] for r in rows)}/{len(rows)}" for c in chips) + "  ")
    lines += ["", "| task | " + " | ".join(chips) + " |", "|---|" + "---|" * len(chips)]
    for r in report["rows"]:
        cells = []
        for chip in chips:
            c = r["chips"][chip]
            if c["ok"]:
                figs = "; ".join(_figure(k) for k in c["kernels"][:2])
                cells.append(f"✓ {c['proposals'][0]}" + (f" ({figs})" if figs else ""))
            elif not c["judged"]:
                cells.append("not judged")
            elif c.get("other_source"):
                cells.append(f"✗ judged and compiled sources differ: {', '.join(c['other_source'])}")
            else:
                cells.append(f"✗ correct: {', '.join(c['correct']) or 'none'}; compiled at full: "
                             f"{', '.join(c['compiled']) or 'none'}")
        lines.append(f"| {r['task']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.full_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--coverage", default=str(RESULTS / "coverage.json"))
    p.add_argument("--compile", default=str(RESULTS / "full_compile.json"))
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    coverage = json.loads(Path(args.coverage).read_text())
    compiled = json.loads(Path(args.compile).read_text())
    report = join(coverage, compiled)
    report.update(command="python -m evals.full_scale " + shlex.join(sys.argv[1:] if argv is None else argv),
                  date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  coverage={k: coverage.get(k) for k in ("command", "date", "merged")},
                  compile={k: compiled.get(k) for k in ("command", "date", "compilers")})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "full_scale.json").write_text(json.dumps(report, indent=2) + "\n")
    text = render(report)
    (out / "full_scale.md").write_text(text)
    print("\n".join(line for line in text.splitlines() if line.endswith("  ")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
