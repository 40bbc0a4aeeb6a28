"""Fixing a candidate that does not compile (or that the static check rejected)."""

from __future__ import annotations

import inspect

import dspy

from mk.signatures.contract import CONTRACT


class FixCompileError(dspy.Signature):
    __doc__ = inspect.cleandoc("""Fix the candidate so that the judge accepts it for the target, changing as little as possible.

    Read the judge's error (a compile or trace error with the candidate's own
    lines, or a rule the static check found broken), the input shapes, the
    hardware brief and the plan; find the cause (shapes that do not divide,
    unsupported ops, wrong block specs, dtype mismatches, a broken rule below)
    and return the whole corrected module, which still defines `kernel` with
    the same arguments and keeps the plan's intent. Earlier fix attempts for
    this candidate are listed: each of them failed, so do not repeat a failed
    fix; try a different change.""") + "\n\n" + CONTRACT

    error: str = dspy.InputField(desc="the judge's verdict and error, with the candidate's own lines where it points at them")
    code: str = dspy.InputField(desc="the candidate module that failed")
    shapes: str = dspy.InputField(desc="the task's inputs: names, dtypes and shapes at every scale, and the statics")
    hardware: str = dspy.InputField(desc="the target hardware spec, tiling rules and a kernel skeleton that lowers")
    plan: str = dspy.InputField(desc="the optimisation the candidate implements; keep its intent")
    earlier_fixes: str = dspy.InputField(desc="earlier fix attempts for this candidate and how each failed; do not repeat them. "
                                         "Empty on the first fix")
    passages: str = dspy.InputField(desc="handbook passages relevant to the error")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    fixed_code: str = dspy.OutputField(desc="the full corrected Python module; no markdown fences")
    explanation: str = dspy.OutputField(desc="the cause and the change, in one or two sentences")
