"""``mk eval TASK CANDIDATE``: judge one candidate on one task.

Prints a table (or, with ``--json``, the :class:`~mk.harness.results.EvalResult`
JSON with its top-level ``status`` and ``reason``). Exit code 0 only for a
``correct`` verdict, 1 for every other verdict (``unverifiable_here`` included),
2 for usage errors (a task or candidate that cannot be loaded; with ``--json``
the error is JSON too), 3 when mk's own judge failed (``harness_error``). With ``--db PATH`` (or ``MK_DB``) the
verdict is also recorded in the store.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "eval",
        help="judge a candidate kernel on a task (compile, correctness, timing)",
        description="Evaluate CANDIDATE (a .py file defining kernel/workload/computation) on TASK (a MaxKernel task dir, "
        "a JAXBench baseline.py, an mk task module or jaxbench:<id>) in a sandboxed worker.",
    )
    p.add_argument("task", metavar="TASK", help="task path or jaxbench:<id>")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file")
    p.add_argument("--target", choices=("tpu", "gpu", "cpu"), default="cpu", help="target platform (default: cpu)")
    p.add_argument("--scale", metavar="NAME", default=None, help="check and time only this scale (e.g. ci); default: every scale")
    p.add_argument("--case", metavar="KEY", action="append", default=None,
                   help="run only this case of the frozen suite (repeatable); KEY is <scale>-s<seed>-<inputs> as a verdict "
                        "prints it, e.g. heldout-s1-normal, ci-s123456-normal (a fresh seed) or size-48x384_384-s99-normal "
                        "(a fresh size)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--db", metavar="PATH", default=None, help="record the verdict in this DuckDB store (default: $MK_DB if set)")
    p.add_argument("--no-time", dest="measure", action="store_false", help="skip timing")
    p.add_argument("--chip", metavar="CHIP", default=None,
                   help="compile the device program for this chip (tpu: v5e, v5p, v6e, v7x; gpu: h100, h200, b200; "
                        "default v6e / h100), with the real compiler and no device")
    p.add_argument("--no-spills", action="store_true", help="a GPU kernel that spills registers is a compile_error")
    p.add_argument("--pure-jax", dest="require_pallas", action="store_false", default=None,
                   help="accept a pure-JAX rewrite on tpu/gpu (no pallas_call required)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mk.candidate import load_candidate
    from mk.harness import evaluate
    from mk.harness.evaluate import prestart
    from mk.loaders import load_task

    from mk.chips import chip_for

    chip_for(args.target, args.chip)  # an unknown chip, or one of the other kind, fails before anything runs
    prestart(args.target)  # the judge's processes import JAX while the task loads
    task = load_task(args.task)
    if args.scale:  # restrict the task as `mk optimize --scale` does, so the suite hash matches the kernel's header
        task = task.only_scale(args.scale)
    candidate = load_candidate(args.candidate)
    db = args.db or os.environ.get("MK_DB")
    if db:  # a locked or unwritable store fails now, before the evaluation
        from mk.store import Store

        Store.open(db).close()
    if not args.json:
        _announce(task, args, candidate.source)
    suite = pick_cases(task, args.case, args.scale) if args.case else None
    result = evaluate(task, candidate, target=args.target, scale=None if suite else args.scale, suite=suite, measure=args.measure,
                      require_pallas=args.require_pallas, chip=args.chip, no_spills=args.no_spills, claim=True)
    if db:
        record(db, result)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        _table(result, args)
    return 0 if result.status == "correct" else 3 if result.status == "harness_error" else 1


def pick_cases(task: Any, keys: list[str], scale: str | None) -> Any:
    """The frozen suite narrowed to ``keys`` (a key not in it, such as a fresh-seed case, is drawn as it says)."""
    import dataclasses

    from mk.errors import ConfigError
    from mk.harness.heldout import FRESH, sized
    from mk.harness.suite import Case, build_suite
    from mk.task import FLOAT_DISTRIBUTIONS

    full = build_suite(task, scales=[scale] if scale else None)
    known = {c.key: c for c in full.cases}
    scales = set(full.scales)
    picked, sizes = [], {}
    for key in keys:
        if key in known:
            picked.append(known[key])
            continue
        parts = key.rsplit("-", 2)
        if parts[0].startswith(FRESH) and parts[0] not in sizes and parts[0] not in scales:  # an evaluation's fresh size
            sizes[parts[0]] = sized(task, parts[0])
            scales.add(parts[0])
        if len(parts) != 3 or not parts[1].startswith("s") or not parts[1][1:].isdigit() or parts[0] not in scales \
                or parts[2] not in FLOAT_DISTRIBUTIONS:
            raise ConfigError(f"no case {key!r} in the suite of {task.name}",
                              hint=f"a key is <scale>-s<seed>-<inputs> with scale one of {', '.join(sorted(scales))}; "
                                   f"the suite's cases: {', '.join(list(known)[:8])}")
        picked.append(Case(parts[0], int(parts[1][1:]), parts[2], note="picked"))
    return dataclasses.replace(full, cases=tuple(picked), heldout=full.heldout + tuple(sizes.values()))


def _announce(task: Any, args: argparse.Namespace, source: str) -> None:
    """Say what is about to run (on stderr), since the judge shows nothing until it is done."""
    import re

    from mk.targets import get_target

    written = re.search(r"^# target: (\w+);", source[:2000], re.M) if source.startswith("# mk ") else None
    if written and written.group(1) != args.target:
        print(f"note: mk wrote this kernel for --target {written.group(1)}; judging it for {args.target}", file=sys.stderr)

    slow = get_target(args.target).mode() == "interpret" and not args.scale and len(task.scales) > 1
    print(f"judging {args.candidate} on {task.name} for {args.target} at scale {', '.join(task.scales)}"
          + ("; the kernel runs interpreted on this CPU, which takes long at full scale: --scale ci checks quickly" if slow else ""),
          file=sys.stderr, flush=True)


def record(db: str, result: Any) -> str | None:
    """Store the verdict when the store is available; returns the evaluation id."""
    try:
        from mk.store import Store
    except ImportError:
        log.info("mk.store is not available; the verdict is not recorded")
        return None
    with Store.open(db) as store:
        return store.record_evaluation(
            task_name=result.task, status=result.status, reason=result.reason, suite_hash=result.suite_hash,
            speedup=result.speedup, result_json=result.model_dump_json(),
        )


def _table(result: Any, args: argparse.Namespace) -> None:
    from rich.table import Table

    from mk.commands._console import console as make_console

    console = make_console()  # not cut at 80 columns when piped
    colour = "green" if result.status == "correct" else "red"
    console.print(f"[bold {colour}]{result.status}[/]: {result.reason}", highlight=False)
    if result.failed_case:
        scale = f" --scale {args.scale}" if args.scale else ""
        console.print(f"reproduce this case: mk eval {args.task} {args.candidate} --target {result.target}{scale} "
                      f"--case {result.failed_case}", soft_wrap=True,
                      highlight=False)
    console.print(f"task {result.task} · target {result.target} · scales {', '.join(result.scales)} · suite {result.suite_hash[:12]}",
                  highlight=False)
    steps = Table("step", "ok", "seconds", "detail", title="steps")
    for s in result.steps:
        steps.add_row(s.name, {True: "yes", False: "no", None: "-"}[s.ok], f"{s.seconds:.2f}", s.detail)
    console.print(steps)
    if result.cases:
        cases = Table("case", "scale", "seed", "inputs", "ok", "max abs", "max rel", "note", title="cases")
        for c in result.cases:
            cases.add_row(str(c.index), c.scale, str(c.seed), c.distribution, "yes" if c.ok else "no",
                          _num(c.max_abs), _num(c.max_rel), c.note)
        console.print(cases)
    t = result.timing
    if t is not None:
        if t.measured:
            console.print(f"speedup [bold]{t.speedup:.3g}x[/] at {t.scale}: candidate {t.candidate_median_s:.3g} s "
                          f"(IQR {t.candidate_iqr_s:.2g}), reference {t.reference_median_s:.3g} s (IQR {t.reference_iqr_s:.2g}), "
                          f"{t.runs} runs over {t.input_sets} input sets", highlight=False)
        else:
            console.print(f"timing: {t.reason}", highlight=False)
    if result.estimate is not None:
        console.print(result.estimate.label(), highlight=False, soft_wrap=True)
    if result.compile_check:
        console.print(f"chip compile: {result.compile_check}", highlight=False, soft_wrap=True)
    if result.compiled:
        figures = Table("chip", "scale", "judged", "compiled", "kernel", "figures", "seconds", title="compiled for the chip")
        for c in result.compiled:
            kernels = [k for k in c.kernels if k.kind == "pallas"] or [None]
            for k in kernels:
                figures.add_row(c.chip, c.scale, "yes" if c.judged else "declared only", "yes" if c.ok else "no",
                                k.name if k else "-", kernel_figures(k, c.limits) if k else c.error, f"{c.seconds:.2f}")
        console.print(figures)
    for flag in result.flags:
        console.print(f"[bold yellow]flag:[/] {flag}", highlight=False)


def kernel_figures(k: Any, limits: dict[str, int]) -> str:
    """One kernel's compiler figures in words: VMEM against the chip's scoped limit, or shared memory, registers and
    spills (a KernelFigures)."""
    if k.scoped_vmem_bytes is not None:
        limit = limits.get("scoped_vmem_bytes")
        return f"{k.scoped_vmem_bytes / 2**20:.2f} MiB scoped VMEM" + (f" of {limit / 2**20:.0f} MiB" if limit else "")
    parts = []
    if k.shared_memory_bytes is not None:
        limit = limits.get("shared_memory_per_block_bytes")
        parts.append(f"{k.shared_memory_bytes / 1024:.1f} KiB shared" + (f" of {limit / 1024:.0f} KiB" if limit else ""))
    if k.registers is not None:
        parts.append(f"{k.registers} registers")
    spill = (k.spill_store_bytes or 0) + (k.spill_load_bytes or 0)
    parts.append(f"{spill} B spilled" if spill else "no spills")
    if k.grid:
        parts.append(f"grid {'x'.join(map(str, k.grid))}, {'x'.join(map(str, k.threads))} threads")
    return ", ".join(parts)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"
