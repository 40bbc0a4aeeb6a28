"""Helpers for the search tests: a scripted author over four pure-JAX candidates, a stub judge, a tiny task module.

They live in an importable module so spawn/Ray workers and `mk resume` can rebuild them by name.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from mk.author.proposal import Proposal
from mk.harness.results import EvalResult, TimingResult

SLOW = "# speed 1.5\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) + jnp.tanh(x)\n"
MID = "# speed 2.0\nimport jax.numpy as jnp\ndef kernel(x):\n    return 2.0 * jnp.tanh(x)\n"
WRONG = "# wrong\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x)\n"
FAST = "# speed 3.0\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"
CANDIDATES = [("slow", SLOW), ("mid", MID), ("wrong", WRONG), ("fast", FAST)]

TASK_MODULE = '''
import jax.numpy as jnp
from mk.task import ArgSpec, Scale, Task, Tolerance

TASK = Task("tanh2", lambda x: jnp.tanh(x) * 2.0, (ArgSpec("x", ("M", "N"), "float32"),),
            {"ci": Scale("ci", {"M": 8, "N": 128})}, tolerance=Tolerance(1e-5, 1e-5))
'''

CALLS: list[str] = []  # sources the stub judged in this process


class ScriptedAuthor:
    """Yields the candidates in a fixed order, like the offline author yields its templates."""

    name = "scripted"

    def __init__(self):
        self.queue = list(CANDIDATES)

    def plan(self, ctx):
        from mk.programs.auto import Plan

        if not self.queue:
            return None
        name, code = self.queue.pop(0)
        return Plan(name, f"try {name}", code)

    def implement(self, ctx, plan):
        return Proposal(plan.name, plan.data, plan.text, "scripted")

    def fix(self, ctx, proposal, error):
        return None

    def analyse(self, ctx, report):
        return ""


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
