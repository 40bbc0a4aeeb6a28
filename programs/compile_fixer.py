"""CompileFixer: a corrected candidate from a compile error or a static-check rejection."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import dspy

from mk.scopes import agent_scope
from mk.programs.validation import Implementation, InvalidOutput, check_code, positional_count, run_validated, strip_fences
from mk.signatures import FixCompileError

#: how much of an error the fixer sees: the tail, where Python and JAX put the cause (generous: shapes live there)
ERROR_CHARS = 6000


class CompileFixer(dspy.Module):
    """``CompileFixer()(error=..., code=...).implementation`` is a validated, changed :class:`Implementation`.

    ``shapes``, ``hardware``, ``plan`` and ``earlier_fixes`` (earlier fix attempts for this candidate, as text) are
    prompt inputs; ``tried`` are the sources those attempts produced: an answer identical to one of them (or to
    the failing code) is rejected and asked again."""

    agent = "compile_fixer"

    def __init__(self, *, attempts: int = 3, retrieve: Callable[[str, int], str] | None = None, k: int = 4):
        super().__init__()
        self.predict = dspy.Predict(FixCompileError)
        self.attempts = attempts
        self.retrieve = retrieve
        self.k = k

    def forward(self, error: str, code: str, passages: str = "", task: Any = None, *, shapes: str = "", hardware: str = "",
                plan: str = "", earlier_fixes: str = "", tried: Sequence[str] = ()) -> dspy.Prediction:
        error = error[-ERROR_CHARS:]  # the tail of a traceback says the most
        if not passages and self.retrieve is not None:
            passages = self.retrieve(error[-1500:], self.k)
        n = positional_count(task) if task is not None else None
        original = strip_fences(code)
        earlier = {strip_fences(t).strip() for t in tried}

        def validate(pred: dspy.Prediction) -> tuple[Implementation, str]:
            impl = check_code(pred.fixed_code, n_positional=n)
            if impl.code.strip() == original.strip():
                raise InvalidOutput("the fixed code is identical to the failing code; change what causes the error")
            if impl.code.strip() in earlier:
                raise InvalidOutput("the fixed code is one an earlier fix attempt already tried, and it failed; "
                                    "do not repeat a failed fix, change something else")
            return impl, pred.explanation

        with agent_scope(self.agent):
            impl, explanation = run_validated(self.predict, validate, agent=self.agent, attempts=self.attempts,
                                              error=error, code=original, shapes=shapes, hardware=hardware, plan=plan,
                                              earlier_fixes=earlier_fixes, passages=passages)
        return dspy.Prediction(implementation=impl, code=impl.code, explanation=explanation)
