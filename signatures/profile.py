"""Analysing a measured profile: what bounds the kernel and what to do next."""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import BaseModel, Field


class ProfileAnalysis(BaseModel):
    """The analyst's reading of the numbers."""

    bottleneck: Literal["compute", "memory", "latency", "overhead", "unknown"] = Field(
        description="what bounds the kernel: compute (MXU/tensor cores), memory (HBM bandwidth), latency "
                    "(too little parallelism or pipelining), overhead (launches, host, small ops)")
    evidence: str = Field(description="the numbers that show it, e.g. 'HBM at 82% of peak, FLOP/s at 9%'")
    next_step: str = Field(default="", description="the single most promising change; empty when stopping")
    decision: Literal["continue", "stop"] = Field(
        description="stop when near the roofline or when recent steps stopped paying off, else continue")
    expected_gain: float = Field(default=1.0, gt=0, description="expected speedup of the next step, e.g. 1.2")


class AnalyzeProfile(dspy.Signature):
    """Read the profile of the current best candidate and decide what to do next.

    Compare achieved FLOP/s and bandwidth with the hardware peaks (roofline
    fractions), look at the time breakdown, and say what bounds the kernel.
    Recommend one concrete next step, or stop when the kernel is close to the
    roofline or the history shows diminishing returns."""

    profile: str = dspy.InputField(desc="measured numbers: time, speedup, FLOP/s, bytes/s, roofline fractions, breakdown")
    task_analysis: str = dspy.InputField(desc="shapes, FLOPs, bytes, arithmetic intensity of the computation")
    hardware: str = dspy.InputField(desc="the target's peaks and memory sizes")
    history: str = dspy.InputField(desc="earlier steps and their measured speedups; empty when none")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    analysis: ProfileAnalysis = dspy.OutputField(desc="bottleneck, evidence, next step and decision")
