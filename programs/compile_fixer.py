"""CompileFixer: a corrected candidate from a compile error."""

from __future__ import annotations

from typing import Any, Callable

import dspy

from mk.lm import agent_scope
from mk.programs.validation import Implementation, InvalidOutput, check_code, positional_count, run_validated, strip_fences
from mk.signatures import FixCompileError


class CompileFixer(dspy.Module):
    """``CompileFixer()(error=..., code=...).implementation`` is a validated, changed :class:`Implementation`."""

    agent = "compile_fixer"

    def __init__(self, *, attempts: int = 3, retrieve: Callable[[str, int], str] | None = None, k: int = 4):
        super().__init__()
        self.predict = dspy.Predict(FixCompileError)
        self.attempts = attempts
        self.retrieve = retrieve
        self.k = k

    def forward(self, error: str, code: str, passages: str = "", task: Any = None) -> dspy.Prediction:
        error = error[-6000:]  # the tail of a traceback says the most
        if not passages and self.retrieve is not None:
            passages = self.retrieve(error[-1500:], self.k)
        n = positional_count(task) if task is not None else None
        original = strip_fences(code)

        def validate(pred: dspy.Prediction) -> tuple[Implementation, str]:
            impl = check_code(pred.fixed_code, n_positional=n)
            if impl.code.strip() == original.strip():
                raise InvalidOutput("the fixed code is identical to the failing code; change what causes the error")
            return impl, pred.explanation

        with agent_scope(self.agent):
            impl, explanation = run_validated(self.predict, validate, agent=self.agent, attempts=self.attempts,
                                              error=error, code=original, passages=passages)
        return dspy.Prediction(implementation=impl, code=impl.code, explanation=explanation)
