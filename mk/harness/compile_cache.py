"""The chip compiler's results kept on disk, so the same exported program is compiled for a chip once.

A chip compile (libtpu for a TPU, XLA's CUDA plugin and ptxas for an H100) takes seconds to minutes, and the same
device program comes back often: a run's kept verdict compiles again what its test phase compiled, ``mk eval`` of a
written kernel, ``mk resume``, the estimate's compile of a reference a second run of the same task needs. Each result
(:class:`mk.harness.results.CompileResult` and the compiler's full error text) is stored under a key of everything
that decides it: the exported program's bytes (sha256), the chip and its limits (``data/hardware.json``), the
options (``--no-spills``, the estimate worker's static schedule), the compilers' versions and this cache's format.
Only finished compiles are kept (a refusal is a result; a timeout or a crashed worker is not).

Where: ``$MK_COMPILE_CACHE`` (a folder), else ``$MK_HOME/cache/compile`` (``~/.mk`` without ``MK_HOME``);
``MK_COMPILE_CACHE=off`` keeps nothing. The tests share one folder per session (tests/conftest.py), so a program
compiled by one test is not compiled again by the next.

The judge trusts an entry as it trusts its own compile: only mk's own process writes it, from the compile worker's
reply, and a candidate never runs in that process nor can write there (its tracer is isolated, mk/harness/isolation.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV_VAR = "MK_COMPILE_CACHE"
#: bump when a stored result's meaning changes (fields, how they are computed)
FORMAT = 1


def folder() -> Path | None:
    """The cache folder (created on first use), or None when ``MK_COMPILE_CACHE=off``."""
    told = os.environ.get(ENV_VAR, "").strip()
    if told.lower() in ("off", "0", "none", "false"):
        return None
    if told:
        return Path(told).expanduser()
    home = os.environ.get("MK_HOME") or os.path.join(os.path.expanduser("~"), ".mk")
    return Path(home).expanduser() / "cache" / "compile"


def key(program_sha: str, chip: str, limits: Any, no_spills: bool, estimate: bool, versions: str) -> str:
    """The entry's name: a digest of everything that decides the compiler's answer."""
    from mk import __version__

    parts = {"program": program_sha, "chip": chip, "limits": limits, "no_spills": no_spills, "estimate": estimate,
             "compilers": versions, "mk": __version__, "format": FORMAT}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def load(name: str) -> tuple[dict[str, Any], str] | None:
    """The stored (result fields, full error) under ``name``; None when absent or unreadable."""
    where = folder()
    if where is None:
        return None
    path = where / f"{name}.json"
    try:
        entry = json.loads(path.read_text())
        return dict(entry["result"]), str(entry.get("error", ""))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a torn or foreign file: compile again
        log.info("compile cache entry %s unreadable (%s); compiling again", path, exc)
        return None


def store(name: str, result: dict[str, Any], error: str) -> None:
    """Keep one result (written whole, then renamed: a reader never sees half an entry); a failure to write is logged,
    never raised (the cache only saves time)."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".entry-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"result": result, "error": error}, f)
        os.replace(tmp, where / f"{name}.json")
    except OSError as exc:
        log.info("compile cache not written in %s (%s)", where, exc)
