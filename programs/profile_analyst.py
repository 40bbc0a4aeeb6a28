"""ProfileAnalyst: bottleneck, next step, and whether to stop, from measured numbers."""

from __future__ import annotations

from typing import Any

import dspy

from mk.scopes import agent_scope
from mk.programs.validation import InvalidOutput, as_text, run_validated
from mk.signatures import AnalyzeProfile, ProfileAnalysis


class ProfileAnalyst(dspy.Module):
    """``ProfileAnalyst()(profile=..., ...).analysis`` is a validated :class:`ProfileAnalysis`."""

    agent = "profile_analyst"

    def __init__(self, *, attempts: int = 3):
        super().__init__()
        self.predict = dspy.Predict(AnalyzeProfile)
        self.attempts = attempts

    def forward(self, profile: Any, task_analysis: Any, hardware: Any, history: Any = "") -> dspy.Prediction:
        with agent_scope(self.agent):
            analysis = run_validated(self.predict, self.validate, agent=self.agent, attempts=self.attempts,
                                     profile=as_text(profile), task_analysis=as_text(task_analysis),
                                     hardware=as_text(hardware), history=as_text(history))
        return dspy.Prediction(analysis=analysis)

    @staticmethod
    def validate(prediction: dspy.Prediction) -> ProfileAnalysis:
        analysis = prediction.analysis
        if not isinstance(analysis, ProfileAnalysis):
            raise InvalidOutput(f"the analysis must be a ProfileAnalysis object, got {type(analysis).__name__}")
        if not analysis.evidence.strip():
            raise InvalidOutput("give the evidence: the measured numbers that show the bottleneck")
        if analysis.decision == "continue" and not analysis.next_step.strip():
            raise InvalidOutput("the decision is 'continue' but next_step is empty; name the next change or stop")
        return analysis
