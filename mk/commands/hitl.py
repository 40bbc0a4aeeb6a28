"""`mk hitl TASK`: optimise with a person in the loop, one phase at a time.

After each phase the artifact is shown (plan text, code, verdict table, tuning,
profile summary) and the prompt asks: [a]pprove (run the next phase), [e]dit
(the plan, or the code once there is code), [r]edo (run the last phase again) or
[q]uit (the session stays in the store: `mk hitl --resume RUN_ID`). An edit
writes the current plan or code to a temporary file and opens $VISUAL or
$EDITOR on it; when stdin is not a terminal or no editor is set, the prompt
names that file: edit it with anything and press Enter, or type the path of
another file, or paste the text up to a line holding a single ".".
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mk.commands._flags import add_budget_flags, budget_from, non_negative_int, positive_int
from mk.errors import ConfigError

CHOICES = {"a": "approve", "approve": "approve", "": "approve", "e": "edit", "edit": "edit", "r": "redo", "redo": "redo",
           "q": "quit", "quit": "quit"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hitl", help="optimise a task with a person approving, editing or redoing each phase",
                       epilog="exit status: 0 with a correct kernel, or when you quit (q; the run is kept as interrupted "
                              "and --resume RUN_ID continues it); 1 when the session ended with no correct kernel; "
                              "130 on Ctrl-C; 2 for bad input")
    p.add_argument("task", nargs="?", help="an mk task module, a MaxKernel task dir, a JAXBench baseline.py or jaxbench:<id>")
    p.add_argument("--resume", metavar="RUN_ID", default=None, help="continue the HITL session of this run from the store")
    from mk.targets import target_names

    p.add_argument("--target", choices=target_names(), default="tpu", help="where the kernel will run (default: tpu)")
    p.add_argument("--scale", default=None, help="restrict the task to this scale (default: every scale it defines)")
    p.add_argument("--lm", default=None, help="a DSPy model string, or 'offline' for the rule-based author")
    p.add_argument("--db", default=None, help="DuckDB file (default: $MK_DB or ~/.mk/mk.duckdb)")
    p.add_argument("--iterations", type=positive_int, default=None, help="iteration limit (default 4, or the resumed run's)")
    p.add_argument("--trials", type=non_negative_int, default=6, help="autotuning trials per candidate (0: no tuning)")
    p.add_argument("--out", default=None, help="folder for the best kernel and the report (default: mk-out, or the resumed run's own)")
    p.add_argument("--json", action="store_true", help="the session on stderr; at the end, the same JSON summary as "
                                                       "`mk optimize --json` on stdout")
    add_budget_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from mk.programs.session import Session

    want_json = getattr(args, "json", False)
    stream = sys.stderr if want_json else sys.stdout  # --json: stdout holds only the JSON
    piped = not (getattr(stream, "isatty", None) and stream.isatty())
    console = Console(highlight=False, file=stream, soft_wrap=piped)  # piped: lines whole, panels at their full width
    if not args.task and not args.resume:
        raise ConfigError("name a task, or a run to resume", hint="mk hitl examples/rmsnorm.py  or  mk hitl --resume RUN_ID")
    from mk.run.output import prepare_output_dir

    if args.out:
        prepare_output_dir(args.out)  # a bad --out fails now, not after the session
    author, announcement = (None, "") if args.resume and not args.lm else _author(args.lm)  # a resume keeps its author
    if announcement:
        console.print(f"[bold]{announcement}[/]")
    if args.resume:
        session = Session.resume(args.resume, db=args.db, author=author, iterations=args.iterations, budget=budget_from(args))
        console.print(f"resumed run {session.run_id}: {len(session.snapshots)} snapshots restored")
        args.out = args.out or session.run.config.out or "mk-out"  # the run's own folder unless told otherwise
        prepare_output_dir(args.out)
    else:
        args.out = args.out or "mk-out"
        prepare_output_dir(args.out)
        session = Session(args.task, target=args.target, author=author, db=args.db, scale=args.scale,
                          iterations=args.iterations or 4, max_trials=args.trials, budget=budget_from(args), out=args.out)
    console.print(f"HITL session {session.run_id} on {session.task.name} ({session.target}); frozen suite {session.traj.suite_hash[:12]}: "
                  f"{len(session.traj.suite.cases)} cases", soft_wrap=True)
    try:
        return _loop(console, session, args)
    except KeyboardInterrupt:
        raise session.interrupt() from None


def _loop(console: Any, session: Any, args: argparse.Namespace) -> int:
    from mk.commands._console import print_whole
    from mk.programs.session import render, render_session

    while not session.done:
        print_whole(console, render(session.step()))
        while not session.done:
            choice = _ask(console, session)
            if choice == "approve":
                break
            if choice == "quit":
                stopped = session.interrupt()  # recorded as interrupted, not left 'running'
                console.print(f"stopped: {stopped}", soft_wrap=True)
                return _finish(console, session, args, "interrupted")
            if choice == "redo":
                console.print(f"running {session.redo()} again")
                break
            if choice == "edit":
                _edit(console, session)
    print_whole(console, render_session(session))
    return _finish(console, session, args)


def _ask(console: Any, session: Any) -> str:
    while True:
        console.print(f"next: [bold]{session.next_phase}[/]  \\[a]pprove / \\[e]dit / \\[r]edo / \\[q]uit? ", end="")
        console.file.flush()
        line = sys.stdin.readline()
        if not _tty():
            console.print(line.strip(), highlight=False, markup=False)  # echo piped answers so the transcript reads right
        if not line:  # end of input: stop here, everything so far is stored
            console.print()
            return "quit"
        choice = CHOICES.get(line.strip().lower())
        if choice:
            return choice
        console.print(f"unknown answer {line.strip()!r}: a (or Enter) runs the next phase, e edits the plan or code, "
                      "r runs the last phase again, q stops (resume later with --resume)", markup=False)


def _edit(console: Any, session: Any) -> None:
    from mk.commands._console import print_whole
    from mk.errors import MkError
    from mk.programs.session import render

    a = session.attempt
    if a.proposal is None and a.plan is None:
        console.print("nothing to edit yet: approve to get a plan")
        return
    try:
        if a.proposal is None and a.failure is not None and a.failure[0] == "implement":
            # the author refused (or failed) to implement the plan: the person writes the code for it
            start = "# " + "\n# ".join(a.plan.text.splitlines()) + "\n\ndef kernel(*args):\n    ...\n"
            text = _read_replacement(console, start, ".py", "code")
            if text.strip():
                print_whole(console, render(session.edit_code(text)))
        elif a.proposal is None:  # the plan is what the last phase produced
            text = _read_replacement(console, a.plan.text, ".md", "plan")
            if text.strip():
                session.edit_plan(text)
                console.print("plan replaced; approve to implement it")
        else:
            text = _read_replacement(console, a.proposal.source, ".py", "code")
            if text.strip():
                print_whole(console, render(session.edit_code(text)))
    except MkError as err:
        console.print(f"[red]cannot edit:[/] {err}")


def _read_replacement(console: Any, current: str, suffix: str, what: str) -> str:
    """The new plan or code ("" keeps the current one): edited in $VISUAL/$EDITOR on a temporary file holding the
    current one (on a terminal); else that file is kept for the person to edit with anything, and the answer is
    Enter (use it), the path of another file, or the text itself pasted up to a line holding a single '.'."""
    with tempfile.NamedTemporaryFile("w", suffix=suffix, prefix=f"mk-{what}-", delete=False) as fh:
        fh.write(current)
    path = Path(fh.name)
    try:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if editor and _tty():
            try:
                subprocess.run([*shlex.split(editor), str(path)], check=True)
            except (OSError, subprocess.CalledProcessError) as exc:
                raise ConfigError(f"the editor {editor!r} failed: {exc}",
                                  hint="fix $EDITOR, or unset it to edit the file yourself or paste the text") from exc
            return _changed(path.read_text(), current)
        console.print(f"the current {what} is in {path}: edit it with any editor and press Enter, or type the path of "
                      f"a file holding the new {what}, or paste it ending with a line holding a single '.' "
                      "(a lone '.' keeps the current one)", markup=False, soft_wrap=True)
        first = sys.stdin.readline()
        if first.strip() == "":
            return _changed(path.read_text(), current) if first else ""
        given = Path(first.strip()).expanduser()
        if "\n" not in first.strip() and given.is_file():
            try:
                return _changed(given.read_text(), current)
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read {given}: {exc}", hint=f"give a readable text file with the {what}") from exc
        lines = [] if first.rstrip("\r\n") == "." else [first]
        if lines:
            for line in iter(sys.stdin.readline, ""):
                if line.rstrip("\r\n") == ".":
                    break
                lines.append(line)
        return "".join(lines)
    finally:
        path.unlink(missing_ok=True)


def _changed(text: str, current: str) -> str:
    """``text``, or "" (keep the current one) when it is the current one unchanged."""
    return "" if text.strip() == current.strip() else text


def _tty() -> bool:
    isatty = getattr(sys.stdin, "isatty", None)
    return bool(isatty and isatty())


def _finish(console: Any, session: Any, args: argparse.Namespace, status: str | None = None) -> int:
    """Write the session's best kernel and its report (the same report every mode writes) and say where."""
    from mk.run.output import write_outputs

    outcome = session.outcome(status)
    report = write_outputs(session.run, outcome, args.out)
    if getattr(args, "json", False):
        import json

        print(json.dumps(report.summary()))
    if report.kernel_path is None:
        console.print(f"no correct kernel yet; report: {report.report_path}; run: {session.run_id}", soft_wrap=True)
        return 0 if status == "interrupted" else 1  # a quit is the person's choice, not a failure: exit 0, resumable
    best = session.best
    speed = f"{best.speedup:.2f}x" if best.speedup is not None else "not measured (no device of this kind here)"
    console.print(f"[bold]correct[/]: best {best.proposal}, speedup {speed}; kernel: {report.kernel_path}; "
                  f"report: {report.report_path}; run: {session.run_id}", soft_wrap=True)
    return 0


def _author(lm: str | None) -> tuple[Any, str]:
    """The author for ``--lm`` and what to announce. With a person deciding when to stop, an LM author goes on
    after its first correct kernel even without a device (``explore``)."""
    from mk.authors import resolve_author

    return resolve_author(lm, explore=True)
