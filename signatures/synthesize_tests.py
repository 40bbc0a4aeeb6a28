"""Synthesising test cases that the frozen suite adds to the built-in ones."""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import BaseModel, Field

EdgeCase = Literal["none", "zeros", "ones", "large_magnitude", "small_magnitude", "negative", "odd_sizes"]


class TestCase(BaseModel):
    """One extra case: shapes and dtypes per input, how values are drawn, what edge it probes."""

    __test__ = False  # not a pytest class

    name: str = Field(description="short snake_case name, e.g. 'ragged_rows'")
    shapes: list[list[int]] = Field(description="one shape per input, in the task's input order")
    dtypes: list[str] = Field(description="one dtype per input, in order; must be the task's dtypes")
    distribution: Literal["normal", "uniform", "wide", "native"] = Field(
        default="normal", description="how floating inputs are drawn: normal, uniform, wide (large spread) or native")
    edge_case: EdgeCase = Field(default="none", description="the edge this case probes")
    seed: int = Field(default=0, ge=0, description="random seed")
    rationale: str = Field(default="", description="what bug this case would catch")


class SynthesizeTests(dspy.Signature):
    """Propose test cases that would expose a wrong kernel for this computation.

    Keep each input's rank and dtype; vary sizes (sizes that do not divide
    common block sizes, size 1, small and mid sizes), value distributions and
    edge cases (zeros, large or tiny magnitudes, negative values) where they
    matter for this computation (e.g. max-subtraction in softmax, epsilon in a
    norm). Keep inputs small enough to run in seconds."""

    reference_code: str = dspy.InputField(desc="source of the reference function")
    task_analysis: str = dspy.InputField(desc="inputs (names, shapes, dtypes), statics, FLOPs, bytes")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    test_cases: list[TestCase] = dspy.OutputField(desc="three to eight test cases")
