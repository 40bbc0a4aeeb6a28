"""Helpers for the search tests: a scripted author over four pure-JAX candidates, a stub judge, a tiny task module.

They live in an importable module so spawn/Ray workers and `mk resume` can rebuild them by name.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import fakes
from fakes import tanh2_module

from mk.harness.results import EvalResult, TimingResult

SLOW = "# speed 1.5\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) + jnp.tanh(x)\n"
MID = "# speed 2.0\nimport jax.numpy as jnp\ndef kernel(x):\n    return 2.0 * jnp.tanh(x)\n"
WRONG = "# wrong\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x)\n"
FAST = "# speed 3.0\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"
CANDIDATES = [("slow", SLOW), ("mid", MID), ("wrong", WRONG), ("fast", FAST)]

TASK_MODULE = tanh2_module({"ci": (8, 128)})

CALLS: list[str] = []  # sources the stub judged in this process


class ScriptedAuthor(fakes.ScriptedAuthor):
    """Yields the candidates in a fixed order, like the offline author yields its templates."""

    def __init__(self):
        super().__init__(CANDIDATES, rationale="try {name}")


def stub_evaluate(task, candidate, *, target="cpu", suite=None, measure=True, config=None, **kw):
    """A stand-in judge: the verdict is written in the candidate's first line (the search logic is under test, not the harness)."""
    CALLS.append(candidate.source)
    delay = float(os.environ.get("MK_TEST_STUB_SLEEP", "0") or 0)
    if delay:
        time.sleep(delay)
    if candidate.source.startswith("# wrong"):
        return EvalResult(status="incorrect", reason="max abs error 1.0 on case 0", task=task.name, target=target)
    speed = float(re.match(r"# speed ([0-9.]+)", candidate.source).group(1))
    timing = (TimingResult(measured=True, speedup=speed, candidate_median_s=1e-3 / speed, reference_median_s=1e-3) if measure
              else TimingResult(measured=False, reason="not measured"))
    return EvalResult(status="correct", reason="all cases pass", task=task.name, target=target, timing=timing)


def write_task(folder: Path) -> Path:
    path = Path(folder) / "tanh2_task.py"
    path.write_text(TASK_MODULE)
    return path
