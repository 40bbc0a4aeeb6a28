"""Full-scale compile table: mk's offline kernels, written at ``ci`` as the quick start writes them, compiled at each
task's ``full`` size for real chips by their own compilers, without the chips.

    python -m evals.full_compile                                  # 50 JaxBench tasks and the examples
    python -m evals.full_compile --tasks 12p,18k --chips v6e h100 --out /tmp/fc
    python -m evals.full_compile --suites examples                # the example task files only (tpu -> v6e v5e,
                                                                  # gpu -> h100 by default)

For each task and target (``tpu``: the TPU chips given; ``gpu``: the GPU chips) the offline author proposes its
candidates for the task restricted to ``ci``; each candidate is exported at ``full`` exactly as the judge's tracer
exports a target program (the lowering assumes the chip: tile tables read the chip's facts) and compiled by the
judge's compile worker (:mod:`mk.harness.chipcheck`). Numerical correctness is not judged here: that is
``evals/coverage.py`` (interpret mode at ``ci``, held-out and fresh sizes). A task counts as covered on a chip when
at least one of its proposals compiles at ``full``. Written to ``evals/results/full_compile.{json,md}`` with the
command, the date and the compilers' versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger("evals.full_compile")
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEFAULT_CHIPS = ("v6e", "v5e", "h100")


def task_ids(suites: list[str]) -> list[str]:
    """``jaxbench:<id>`` for the built-in suite, ``examples:<name>`` for each example task file (a file that is not
    a task, such as ``optimize_in_code.py``, is left out)."""
    from mk.errors import TaskError
    from mk.loaders import load_task
    from mk.suite import list_builtin

    ids: list[str] = []
    for suite in suites:
        if suite == "examples":
            for path in sorted(EXAMPLES.glob("*.py")):
                try:
                    load_task(path)
                except TaskError:
                    continue
                ids.append(f"examples:{path.stem}")
        else:
            ids += list_builtin(suite)
    return ids


def load(task_id: str) -> Any:
    from mk.loaders import load_task
    from mk.suite import load_builtin

    suite, _, name = task_id.partition(":")
    return load_task(EXAMPLES / f"{name}.py") if suite == "examples" else load_builtin(task_id)


def export_at(task: Any, source: str, target: str, chip: str, scale: str) -> bytes:
    """The candidate's target program at ``scale``, exported as the judge's tracer exports it (mk's own kernels run
    in this process: this is an eval script, not the judge)."""
    import jax
    from jax import export

    from mk.candidate import Candidate
    from mk.harness.tracer import _bind
    from mk.targets import get_target

    cand = Candidate.from_source(source)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate_full.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"mk_full_compile_{abs(hash(source))}", path)
        module = importlib.util.module_from_spec(spec)
        tgt = get_target(target)
        with tgt.lowering_context(chip):
            spec.loader.exec_module(module)
            entry = getattr(module, cand.entry)
            fn = _bind(entry, list(task.static_values(scale)), task.static_as_kwargs, [s.name for s in task.static], {})
            checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(tgt.kernel_calls)]
            exported = export.export(jax.jit(fn), platforms=[tgt.platform], disabled_checks=checks)(*task.arg_structs(scale))
    return exported.serialize()


def check_task(task_id: str, chips_by_target: dict[str, list[str]], scale: str) -> dict[str, Any]:
    from mk.author import OfflineAuthor
    from mk.candidate import Candidate
    from mk.chips import get_chip
    from mk.harness import chipcheck
    from mk.harness.process import default_memory_limit_mb

    task = load(task_id)
    row: dict[str, Any] = {"task": task_id, "name": task.name, "targets": {}}
    if scale not in task.scales:
        row["error"] = f"the task declares no {scale!r} scale"
        return row
    written = task.only_scale("ci") if "ci" in task.scales else task
    for target, chips in chips_by_target.items():
        entry: dict[str, Any] = {"proposals": []}
        t0 = time.perf_counter()
        try:
            authored = OfflineAuthor().propose(written, target)
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            entry["error"] = f"the author failed: {type(exc).__name__}: {exc}"[:400]
            row["targets"][target] = entry
            continue
        entry["declined"] = authored.declined
        for proposal in authored.proposals:
            p: dict[str, Any] = {"name": proposal.name, "digest": Candidate.from_source(proposal.source).digest, "chips": {}}
            for chip in chips:
                try:
                    blob = export_at(task, proposal.source, target, chip, scale)
                except Exception as exc:  # noqa: BLE001 - it does not trace at full: recorded as such
                    p["chips"][chip] = {"ok": False, "stage": "trace", "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400]}
                    continue
                try:
                    results, flags = chipcheck.compile_scales(get_chip(chip), {scale: blob}, set(), memory_mb=default_memory_limit_mb())
                    if not results:  # the compile ran past chipcheck.COMPILE_S: a flag, no result
                        p["chips"][chip] = {"ok": False, "stage": "timeout", "error": (flags or ["no result"])[-1][:400]}
                        continue
                    r = results[0]
                    p["chips"][chip] = {"ok": r.ok, "stage": "compile", "error": r.error, "seconds": round(r.seconds, 2),
                                        "summary": r.summary(), "flags": flags, "compiler": r.compiler,
                                        "kernels": [k.model_dump(exclude_none=True) for k in r.kernels if k.kind == "pallas"]}
                except chipcheck.CompileRefused as refused:
                    p["chips"][chip] = {"ok": False, "stage": refused.status, "error": refused.reason[:400]}
            entry["proposals"].append(p)
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        entry["covered"] = {chip: any(p["chips"].get(chip, {}).get("ok") for p in entry["proposals"]) for chip in chips}
        row["targets"][target] = entry
    return row


def render(report: dict[str, Any]) -> str:
    chips = [c for cs in report["chips"].values() for c in cs]
    lines = [f"# Full-scale compile table ({report['date']})", "",
             f"Command: `{report['command']}`", "",
             f"Compilers: {report['compilers']}. Kernels written by the offline author at `ci` (as the quick start "
             f"writes them), exported at `{report['scale']}` and compiled for each chip without the chip. Numerical "
             "correctness is judged elsewhere (`evals/results/coverage.md`); this table is whether the chip's "
             "compiler accepts the kernel at the task's own size, with its figures.", ""]
    for suite in dict.fromkeys(r["task"].partition(":")[0] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["task"].partition(":")[0] == suite]
        totals = {c: sum(1 for r in rows for t in r.get("targets", {}).values() if t.get("covered", {}).get(c))
                  for c in chips}
        lines.append(f"{suite} tasks with a proposal that compiles at full: "
                     + ", ".join(f"{c} {totals[c]}/{len(rows)}" for c in chips) + "  ")
    lines += ["", "| task | " + " | ".join(chips) + " |", "|---|" + "---|" * len(chips)]
    for r in report["rows"]:
        cells = []
        for chip in chips:
            target = next(t for t, cs in report["chips"].items() if chip in cs)
            entry = r.get("targets", {}).get(target, {})
            props = entry.get("proposals", [])
            if not props:
                cells.append("declined" if entry.get("declined") or not entry.get("error") else "author failed")
                continue
            parts = []
            for p in props:
                c = p["chips"].get(chip, {})
                if c.get("ok"):
                    figs = "; ".join(_figure(k) for k in c.get("kernels", [])[:2])
                    parts.append(f"{p['name']}: ok ({figs})")
                else:
                    parts.append(f"{p['name']}: **{c.get('stage', '?')}** {_short(c.get('error', ''))}")
            cells.append("<br>".join(parts))
        lines.append(f"| {r['task']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _figure(k: dict[str, Any]) -> str:
    if "scoped_vmem_bytes" in k:
        return f"{k['scoped_vmem_bytes'] / 2**20:.1f} MiB VMEM"
    spill = k.get("spill_store_bytes", 0) + k.get("spill_load_bytes", 0)
    return f"{k.get('shared_memory_bytes', 0) / 1024:.0f} KiB smem, {k.get('registers', '?')} regs" + (f", {spill} B spill" if spill else "")


def _short(text: str, n: int = 160) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= n else text[: n - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.full_compile", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=None, help="comma-separated task ids or prefixes (default: all of the suites)")
    p.add_argument("--suites", default="jaxbench,examples", help="comma-separated: jaxbench, examples")
    p.add_argument("--chips", nargs="+", default=list(DEFAULT_CHIPS))
    p.add_argument("--scale", default="full")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--merge-from", default=None, metavar="JSON",
                   help="an earlier full_compile.json: its rows for the tasks not checked now are kept (the command "
                        "and date of both runs are recorded)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from mk.chips import get_chip
    from mk.harness.compiler import versions

    chips_by_target: dict[str, list[str]] = {}
    for name in args.chips:
        chip = get_chip(name)
        chips_by_target.setdefault(chip.kind, []).append(chip.name)
    ids = task_ids([x.strip() for x in args.suites.split(",") if x.strip()])
    if args.tasks:
        wanted = [t.strip() for t in args.tasks.split(",") if t.strip()]
        ids = [i for i in ids if any(i.split(":")[-1] == w or i.split(":")[-1].startswith(w + "_") or i == w for w in wanted)]
    rows = []
    started = time.perf_counter()
    for task_id in ids:
        t0 = time.perf_counter()
        try:
            rows.append(check_task(task_id, chips_by_target, args.scale))
        except Exception as exc:  # noqa: BLE001
            rows.append({"task": task_id, "error": f"{type(exc).__name__}: {exc}"[:400]})
        log.info("%s: %.0f s (%.0f s so far)", task_id, time.perf_counter() - t0, time.perf_counter() - started)
    command = "python -m evals.full_compile " + shlex.join(sys.argv[1:] if argv is None else argv)
    if args.merge_from:
        earlier = json.loads(Path(args.merge_from).read_text())
        fresh = {r["task"]: r for r in rows}
        rows = [fresh.pop(r["task"], r) for r in earlier["rows"]] + list(fresh.values())
        command += f" (rows of the other tasks from `{earlier['command']}`, {earlier['date']})"
    report = {"command": command,
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "scale": args.scale,
              "chips": chips_by_target, "compilers": "; ".join(f"{k}: {versions(k)}" for k in chips_by_target),
              "wall_s": round(time.perf_counter() - started, 1), "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "full_compile.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "full_compile.md").write_text(render(report))
    print(render(report).split("\n\n")[3])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
