"""TestSynthesizer: typed extra test cases for the frozen suite."""

from __future__ import annotations

import inspect
from typing import Any

import dspy

from mk.scopes import agent_scope
from mk.programs.validation import as_text, check_test_cases, run_validated
from mk.signatures import SynthesizeTests, TestCase


class TestSynthesizer(dspy.Module):
    """``TestSynthesizer()(task=...).test_cases`` is a list of :class:`TestCase` that fit the task."""

    __test__ = False  # not a pytest class
    agent = "test_synthesizer"

    def __init__(self, *, attempts: int = 3, max_elements: int = 1 << 22, max_cases: int = 12):
        super().__init__()
        self.predict = dspy.Predict(SynthesizeTests)
        self.attempts = attempts
        self.max_elements = max_elements
        self.max_cases = max_cases

    def forward(self, task: Any, analysis: Any = "") -> dspy.Prediction:
        def validate(pred: dspy.Prediction) -> list[TestCase]:
            cases = list(pred.test_cases)[: self.max_cases]
            return check_test_cases(cases, task, max_elements=self.max_elements)

        with agent_scope(self.agent):
            cases = run_validated(self.predict, validate, agent=self.agent, attempts=self.attempts,
                                  reference_code=_source(task.reference),
                                  task_analysis=f"{input_spec(task)}\n\n{as_text(analysis)}".strip())
        return dspy.Prediction(test_cases=cases)


def input_spec(task: Any) -> str:
    """The task's inputs, statics and scales as prompt text (ranks and dtypes are what cases must keep)."""
    lines = [f"inputs of {task.name} (in order):"]
    shapes = {n: task.shapes(n) for n in task.scales}
    for i, arg in enumerate(task.args):
        per_scale = ", ".join(f"{n}={list(s[i])}" for n, s in shapes.items())
        lines.append(f"- {arg.name}: dtype {arg.dtype}, rank {len(arg.shape)}, init {arg.init.kind}; shapes {per_scale}")
    for s in task.static:
        lines.append(f"- static {s.name} = {s.value!r}")
    return "\n".join(lines)


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return repr(fn)
