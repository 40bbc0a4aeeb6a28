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

import functools
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any
from mk.home import home

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
    return home() / "cache" / "compile"


#: mk's own code that runs the compile and reads its answer (a fix there must not be hidden by an old entry)
_CODE = ("harness/compiler.py", "harness/chipcheck.py", "harness/mosaic_traffic.py", "harness/results.py", "chips.py",
         "hardware.py", "harness/compile_cache.py")
#: the environment the compile worker inherits that changes what the compilers do
_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "JAX_ENABLE_X64", "TPU_ACCELERATOR_TYPE")
#: a refusal that says the worker ran out of something, not that the compiler refuses the program: never kept
RESOURCE = re.compile(r"MemoryError|RESOURCE_EXHAUSTED|out of memory|Cannot allocate memory|mmap error|std::bad_alloc",
                      re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def _code() -> str:
    """A digest of :data:`_CODE`, read once per process."""
    import mk

    root = Path(mk.__file__).resolve().parent
    digest = hashlib.sha256()
    for rel in _CODE:
        try:
            digest.update((root / rel).read_bytes())
        except OSError:
            digest.update(rel.encode())
    return digest.hexdigest()


def key(program_sha: str, chip: str, chip_facts: Any, no_spills: bool, estimate: bool, versions: str) -> str:
    """The entry's name: a digest of everything that decides the compiler's answer: the program, the chip and every
    fact of it the compile reads (``chip_facts``: its limits and its ``compile`` entry), the options, the compilers'
    versions, the worker's inherited environment, and mk's own compile code."""
    from mk import __version__

    parts = {"program": program_sha, "chip": chip, "chip_facts": chip_facts, "no_spills": no_spills,
             "estimate": estimate, "compilers": versions, "mk": __version__, "code": _code(), "format": FORMAT,
             "env": {k: os.environ.get(k, "") for k in _ENV}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()



def keepable(reply_has_ok: bool, error: str) -> bool:
    """Whether a finished compile's result may be kept: the worker said ok or not ok itself (not a failure around
    the compile), and a refusal is not the worker running out of memory (which a larger limit would not repeat)."""
    return reply_has_ok and not RESOURCE.search(error or "")


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
