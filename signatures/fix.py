"""Fixing a candidate that does not compile."""

from __future__ import annotations

import dspy


class FixCompileError(dspy.Signature):
    """Fix the candidate so that it compiles for the target, changing as little as possible.

    Read the compiler error and the handbook passages, find the cause (shapes
    that do not divide, unsupported ops, wrong block specs, dtype mismatches)
    and return the whole corrected module, which still defines `kernel` with the
    same arguments and keeps the optimisation's intent."""

    error: str = dspy.InputField(desc="the compiler or tracer error, with its traceback tail")
    code: str = dspy.InputField(desc="the candidate module that failed")
    passages: str = dspy.InputField(desc="handbook passages relevant to the error")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    fixed_code: str = dspy.OutputField(desc="the full corrected Python module; no markdown fences")
    explanation: str = dspy.OutputField(desc="the cause and the change, in one or two sentences")
