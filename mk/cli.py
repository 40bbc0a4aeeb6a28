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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)], format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except MkError as err:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(err))}", markup=True, highlight=False)  # paths may hold [...]
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted; everything written so far is kept (`mk runs` lists the run; `mk resume RUN` continues a search)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
