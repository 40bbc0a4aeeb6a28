"""The ``mk`` command line.

Each sub-command is a module in :mod:`mk.commands` that defines
``register(subparsers)``; the parser it adds sets ``func(args) -> int``.
Modules are discovered, so adding a command never edits this file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from mk import __version__
from mk.errors import MkError

log = logging.getLogger("mk")


def build_parser() -> argparse.ArgumentParser:
    import mk.commands as commands

    parser = argparse.ArgumentParser(prog="mk", description="mk writes, verifies, tunes and profiles custom kernels for JAX functions.")
    parser.add_argument("--version", action="version", version=f"mk {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"mk.commands.{info.name}").register(sub)
    return parser


#: options every command takes that a user may write on either side of the command name
_GLOBAL_FLAGS = {"-v", "-vv", "-vvv", "--verbose"}
_COMMAND_OPTIONS = {"--db": 1, "--kb": 1, "--json": 0}


def normalise(argv: list[str], commands: set[str]) -> list[str]:
    """``argv`` with the common options where argparse wants them: ``-v`` before the command, ``--db PATH``,
    ``--kb DIR`` and ``--json`` after it (``mk --db x.duckdb runs`` = ``mk runs --db x.duckdb``)."""
    at = next((i for i, a in enumerate(argv) if a in commands), None)
    if at is None:
        return list(argv)
    front, command, rest = list(argv[:at]), argv[at], list(argv[at + 1:])
    moved: list[str] = []
    i, kept = 0, []
    while i < len(front):
        a = front[i]
        name = a.split("=", 1)[0]
        if name in _COMMAND_OPTIONS:
            n = 0 if "=" in a else _COMMAND_OPTIONS[name]
            moved += front[i:i + 1 + n]
            i += 1 + n
            continue
        kept.append(a)
        i += 1
    late = [a for a in rest if a in _GLOBAL_FLAGS and "--" not in rest[:rest.index(a)]]
    rest = [a for a in rest if a not in late]
    return kept + late + [command] + moved + rest


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices) if parser._subparsers else set()
    argv = normalise(list(sys.argv[1:] if argv is None else argv), commands)
    want_json = "--json" in argv
    if want_json:  # --json always prints JSON, usage errors included, at every level (`mk kb search` too)
        _json_usage_errors(parser, argv, commands)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, so its usage (not the top-level one) is shown
        subs = parser._subparsers._group_actions[0].choices if parser._subparsers else {}
        owner = subs.get(getattr(args, "command", None) or "", parser)
        owner.error(f"unrecognized arguments: {' '.join(extra)} (see `mk {args.command or ''} --help`)".replace("mk  ", "mk "))
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)], format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from mk import interrupts

    interrupts.install()  # Ctrl-C and SIGTERM end a command as an interrupt, never lost (mk/interrupts.py)
    from mk.targets import pin_jax_to_cpu_without_devices

    pin_jax_to_cpu_without_devices()  # no TPU/GPU here: JAX need not try (and print) each installed plugin
    try:
        return int(args.func(args) or 0)
    except MkError as err:
        if want_json:
            _print_json_error(type(err).__name__, err.message, err.hint)
            return err.exit_code
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(err))}", markup=True, highlight=False)  # paths may hold [...]
        return err.exit_code
    except KeyboardInterrupt as exc:
        print(str(exc) or "interrupted; everything written so far is kept (`mk runs` lists the run; `mk resume RUN` "
              "continues it)", file=sys.stderr)
        return 130


def _json_usage_errors(parser: argparse.ArgumentParser, argv: list[str], commands: set[str]) -> None:
    """Make ``parser`` and every parser below it (sub-commands of sub-commands included) report a usage error as
    one JSON object and exit 2."""

    def hook(p: argparse.ArgumentParser, top: bool) -> None:
        hint = f"see `mk {next((a for a in argv if a in commands), '')} --help`" if top else f"see `{p.prog} --help`"

        def json_error(message: str) -> None:
            _print_json_error("UsageError", message, hint.replace("mk  ", "mk "))
            raise SystemExit(2)

        p.error = json_error  # type: ignore[method-assign]
        for action in p._subparsers._group_actions if p._subparsers else ():
            for sub in getattr(action, "choices", {}).values():
                hook(sub, False)

    hook(parser, True)


def _print_json_error(kind: str, message: str, hint: str | None) -> None:
    import json

    print(json.dumps({"status": "usage_error", "error": kind, "reason": message, "hint": hint}, indent=2))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
