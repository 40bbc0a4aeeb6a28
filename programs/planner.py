"""Planner: the next optimisation step, from the analysis, hardware, passages and measured feedback."""

from __future__ import annotations

from typing import Any, Callable

import dspy

from mk.scopes import agent_scope
from mk.programs.validation import InvalidOutput, as_text, run_validated
from mk.signatures import Plan, PlanOptimization

Retrieve = Callable[[str, int], str]


class Planner(dspy.Module):
    """``Planner()(task_analysis=..., hardware=..., feedback=..., history=..., kernels=...).plan`` is a validated :class:`Plan`."""

    agent = "planner"

    def __init__(self, *, attempts: int = 3, retrieve: Retrieve | None = None, k: int = 5, max_speedup: float = 100.0):
        super().__init__()
        self.predict = dspy.Predict(PlanOptimization)
        self.attempts = attempts
        self.retrieve = retrieve
        self.k = k
        self.max_speedup = max_speedup

    def forward(self, task_analysis: Any, hardware: Any, passages: str = "", feedback: Any = "",
                history: Any = "", kernels: Any = "") -> dspy.Prediction:
        analysis = as_text(task_analysis)
        if not passages and self.retrieve is not None:
            passages = self.retrieve(f"{analysis[:500]}\n{as_text(feedback)[:300]}", self.k)
        with agent_scope(self.agent):
            plan = run_validated(self.predict, self.validate, agent=self.agent, attempts=self.attempts,
                                 task_analysis=analysis, hardware=as_text(hardware), passages=passages,
                                 feedback=as_text(feedback), history=as_text(history), kernels=as_text(kernels))
        return dspy.Prediction(plan=plan)

    def validate(self, prediction: dspy.Prediction) -> Plan:
        plan = prediction.plan
        if not isinstance(plan, Plan):
            raise InvalidOutput(f"the plan must be a Plan object, got {type(plan).__name__}")
        if len(plan.strategy.strip()) < 10:
            raise InvalidOutput("the strategy is empty; say what to change and why it is faster")
        bad = {k: v for k, v in plan.tiling.items() if v <= 0}
        if bad:
            raise InvalidOutput(f"tiling sizes must be positive integers, got {bad}")
        if plan.expected_speedup > self.max_speedup:
            raise InvalidOutput(f"an expected speedup of {plan.expected_speedup}x is not credible; "
                                "estimate it from the roofline")
        return plan
