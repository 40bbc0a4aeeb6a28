"""TuningSpaceProposer: the autotuner's search space for a candidate."""

from __future__ import annotations

from typing import Any

import dspy

from mk.scopes import agent_scope
from mk.programs.validation import as_text, check_config_space, run_validated, strip_fences
from mk.signatures import ProposeTuningSpace


class TuningSpaceProposer(dspy.Module):
    """``TuningSpaceProposer()(code=..., ...).config_space``: keyword → values, at most ``max_configs`` configs."""

    agent = "tuning_space"

    def __init__(self, *, attempts: int = 3, max_configs: int = 256):
        super().__init__()
        self.predict = dspy.Predict(ProposeTuningSpace)
        self.attempts = attempts
        self.max_configs = max_configs

    def forward(self, code: str, task_analysis: Any, hardware: Any) -> dspy.Prediction:
        code = strip_fences(code)

        def validate(pred: dspy.Prediction) -> dict[str, list[Any]]:
            return check_config_space(pred.config_space, code=code, max_configs=self.max_configs)

        with agent_scope(self.agent):
            space = run_validated(self.predict, validate, agent=self.agent, attempts=self.attempts, code=code,
                                  task_analysis=as_text(task_analysis), hardware=as_text(hardware))
        return dspy.Prediction(config_space=space)
