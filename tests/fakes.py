"""The tests' shared fakes: the scripted author, the tiny tanh2 task (as a Task and as a task module's source) and
the two-input tanh_mix task the judge's fixtures are written for.

The LM fakes (a DSPy LM scripted per output field, the Gemini client on the local fake server) are in
tests/lm_fakes.py beside the fake server itself (tests/fake_gemini.py, which evals/lm_calls.py also runs); the
search and bench helpers (tests/search_support.py, tests/bench_support.py) build on the pieces here. Workers and
``mk resume`` rebuild an author by its importable name (``search_support:ScriptedAuthor``), so these are modules,
never test files.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from mk.author.proposal import Proposal
from mk.programs.auto import Plan


class ScriptedAuthor:
    """An author that plans from a script and implements what it planned.

    ``plans``: ``(name, code)`` pairs, planned in order (``code`` None: ``implement`` decides); ``rationale``: the
    plan's text, formatted with ``name`` and ``feedback``; ``implement``: the code for a plan whose code is None, from
    the plan's text; ``fixed``: the code a fix returns (None: no fix); ``only``: the task names it plans for (it
    declines the others, saying so in ``declined``); ``analysis``: what :meth:`analyse` says, from the profile.
    It records what it was asked: ``contexts`` (history, feedback), ``implemented`` (plan texts), ``fixes`` (errors)."""

    name = "scripted"

    def __init__(self, plans: Iterable[tuple[str, str | None]] = (), *, rationale: str = "scripted",
                 implement: Callable[[str], str] | None = None, fixed: str | None = None,
                 only: Iterable[str] | None = None, analysis: Callable[[Any], str] | None = None):
        self.plans = list(plans)
        self.rationale = rationale
        self.choose = implement
        self.fixed = fixed
        self.only = None if only is None else set(only)
        self.analysis = analysis
        self.contexts: list[tuple[Any, Any]] = []
        self.implemented: list[str] = []
        self.fixes: list[str] = []
        self.declined: dict[str, str] = {}

    def plan(self, ctx: Any) -> Plan | None:
        self.contexts.append((ctx.history, ctx.feedback))
        if self.only is not None and ctx.task.name not in self.only:
            self.declined = {"script": f"nothing scripted for {ctx.task.name}"}
            return None
        if not self.plans:
            return None
        name, code = self.plans.pop(0)
        return Plan(name, self.rationale.format(name=name, feedback=ctx.feedback), code)

    def implement(self, ctx: Any, plan: Plan) -> Proposal:
        self.implemented.append(plan.text)
        code = plan.data if plan.data is not None else self.choose(plan.text)
        return Proposal(plan.name, code, plan.text, "scripted")

    def fix(self, ctx: Any, proposal: Proposal, error: str) -> Proposal | None:
        self.fixes.append(error)
        if self.fixed is None:
            return None
        return Proposal(proposal.name, self.fixed, proposal.rationale + " (fixed)", "scripted")

    def analyse(self, ctx: Any, report: Any) -> str:
        return self.analysis(report) if self.analysis is not None else ""


#: the tiny task most tests judge: tanh(x) * factor over (M, N) float32 rows, at the sizes each test asks for
def tanh2_module(scales: dict[str, tuple[int, int]] | None = None, *, factor: str = "2.0", name: str = "tanh2") -> str:
    """tanh2's task module as source (a file for the CLI, a suite folder, a worker): ``scales`` name -> (M, N)."""
    sizes = ", ".join(f'"{s}": Scale("{s}", {{"M": {m}, "N": {n}}})' for s, (m, n) in (scales or {"ci": (8, 128)}).items())
    return ("import jax.numpy as jnp\nfrom mk.task import ArgSpec, Scale, Task, Tolerance\n\n\n"
            f"def tanh2(x):\n    return jnp.tanh(x) * {factor}\n\n\n"
            f'TASK = Task("{name}", tanh2, (ArgSpec("x", ("M", "N"), "float32"),),\n'
            f"            {{{sizes}}}, tolerance=Tolerance(1e-5, 1e-5))\n")


def tanh2_task(scales: dict[str, tuple[int, int]] | None = None, *, name: str = "tanh2") -> Any:
    """tanh2 as a :class:`mk.task.Task` (its reference a module-level function: picklable for process workers)."""
    from mk.task import ArgSpec, Scale, Task, Tolerance

    sizes = {s: Scale(s, {"M": m, "N": n}) for s, (m, n) in (scales or {"ci": (8, 128)}).items()}
    return Task(name, tanh2, (ArgSpec("x", ("M", "N"), "float32"),), sizes, tolerance=Tolerance(1e-5, 1e-5))


def tanh2(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x) * 2.0


def tanh_mix(x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x) * y + 0.5 * x


def tanh_mix_task(rows: dict[str, int], *, name: str = "tanh_mix", default_scale: str = "ci") -> Any:
    """``tanh(x) * y + 0.5 * x`` over (rows, 128) float32 inputs, ``rows`` per scale: the task the judge's fixture
    candidates (tests/adversarial, ``kernel(x, y)``) are written for."""
    from mk.task import ArgSpec, Scale, Task

    args = (ArgSpec("x", ("rows", 128), "float32"), ArgSpec("y", ("rows", 128), "float32"))
    return Task(name, tanh_mix, args, {s: Scale(s, {"rows": n}) for s, n in rows.items()}, default_scale=default_scale)
