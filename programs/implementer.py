"""Implementer: a candidate module (``kernel`` and ``CONFIG_SPACE``) from a plan."""

from __future__ import annotations

from typing import Any, Callable

import dspy

from mk.scopes import agent_scope
from mk.programs.validation import Implementation, as_text, check_code, positional_count, run_validated
from mk.signatures import ImplementKernel, Plan


class Implementer(dspy.Module):
    """``Implementer()(...).implementation`` is a validated :class:`Implementation`.

    With ``task``, the entry point must take the task's positional inputs; ``kernels`` is the best kernel so far
    and the latest failing one, as text (see :meth:`mk.programs.lm_author.LMAuthor.kernels_text`)."""

    agent = "implementer"

    def __init__(self, *, attempts: int = 3, retrieve: Callable[[str, int], str] | None = None, k: int = 5):
        super().__init__()
        self.predict = dspy.Predict(ImplementKernel)
        self.attempts = attempts
        self.retrieve = retrieve
        self.k = k

    def forward(self, task_analysis: Any, plan: Plan, hardware: Any, passages: str = "",
                task: Any = None, kernels: Any = "") -> dspy.Prediction:
        if not passages and self.retrieve is not None:
            passages = self.retrieve(f"{plan.approach} {plan.strategy} {plan.memory_placement} {plan.pipelining}", self.k)
        n = positional_count(task) if task is not None else None

        def validate(pred: dspy.Prediction) -> Implementation:
            return check_code(pred.code, n_positional=n, config_space=pred.config_space)

        with agent_scope(self.agent):
            impl = run_validated(self.predict, validate, agent=self.agent, attempts=self.attempts,
                                 task_analysis=as_text(task_analysis), plan=plan, hardware=as_text(hardware),
                                 passages=passages, kernels=as_text(kernels))
        return dspy.Prediction(implementation=impl, code=impl.code, config_space=impl.config_space)
