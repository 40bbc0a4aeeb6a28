"""Compiled sub-agent programs: prompts optimised by ``evals/compile.py`` (GEPA or MIPROv2).

A compiled program is the DSPy state of one sub-agent (instructions and demos
per predictor) saved as ``data/programs/<agent>.json``, with a sidecar
``<agent>.meta.json`` saying how it was made (optimizer, model, train tasks,
scores, and each predictor's signature field names). mk loads it by default
when present: each sub-agent calls :func:`load_compiled` on itself.

``MK_NO_COMPILED=1`` turns loading off (the hand-written prompts are used);
``MK_PROGRAMS_DIR`` points at another folder of compiled programs. A compiled
file that does not fit the current sub-agent (renamed predictors, changed
signature) is skipped with a warning, never half-applied.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DISABLE_ENV = "MK_NO_COMPILED"
DIR_ENV = "MK_PROGRAMS_DIR"


def programs_dir() -> Path:
    """Where compiled programs live: ``$MK_PROGRAMS_DIR`` or the packaged ``data/programs``."""
    override = os.environ.get(DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    return Path(str(importlib.resources.files("mk.data"))) / "programs"


def compiled_enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in {"1", "true", "yes", "on"}


def compiled_path(agent: str, directory: str | Path | None = None) -> Path:
    return Path(directory) / f"{agent}.json" if directory is not None else programs_dir() / f"{agent}.json"


def meta_path(program: Path) -> Path:
    return program.with_name(program.stem + ".meta.json")


def signature_fields(module: Any) -> dict[str, list[str]]:
    """Each predictor's signature field names (inputs then outputs), by predictor name."""
    return {name: list(pred.signature.fields) for name, pred in module.named_predictors()}


def fit_problem(state: dict[str, Any], module: Any, meta: dict[str, Any] | None = None) -> str | None:
    """Why ``state`` (a saved program) cannot be loaded into ``module``; None when it fits."""
    saved = {k for k in state if k != "metadata"}
    current = signature_fields(module)
    if saved != set(current):
        return f"its predictors {sorted(saved)} are not the sub-agent's {sorted(current)}"
    predictors = dict(module.named_predictors())
    for name, fields in current.items():
        got = state[name].get("signature", {}).get("fields", [])
        if len(got) != len(fields):
            return f"predictor {name!r} was compiled for {len(got)} signature fields, the sub-agent has {len(fields)}"
        # optimizers rewrite instructions and demos, never field descriptions: a changed one means another signature
        descs = [(f.json_schema_extra or {}).get("desc", "") for f in predictors[name].signature.fields.values()]
        changed = [f for f, saved, now in zip(fields, got, descs) if saved.get("description", now) != now]
        if changed:
            return f"predictor {name!r} was compiled for other signature fields (differs at {changed[:3]})"
    if meta and isinstance(meta.get("fields"), dict):
        for name, fields in current.items():
            if meta["fields"].get(name) not in (None, fields):
                return f"predictor {name!r} was compiled for fields {meta['fields'][name]}, the sub-agent has {fields}"
    return None


def load_compiled(agent: str, module: Any, *, directory: str | Path | None = None) -> Path | None:
    """Load ``<dir>/<agent>.json`` into ``module`` when present, enabled and fitting.

    Returns the path loaded (also kept as ``module.compiled_from``) or None."""
    if not compiled_enabled():
        log.debug("compiled programs are disabled (%s is set)", DISABLE_ENV)
        return None
    path = compiled_path(agent, directory)
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
        meta_file = meta_path(path)
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the compiled %s program %s: unreadable (%s); delete or recompile it", agent, path, exc)
        return None
    problem = fit_problem(state, module, meta)
    if problem is not None:
        log.warning("ignoring the compiled %s program %s: %s; recompile it with evals/compile.py "
                    "(or set %s=1)", agent, path, problem, DISABLE_ENV)
        return None
    module.load_state(state)
    module.compiled_from = path
    log.info("loaded the compiled %s program from %s", agent, path)
    return path
