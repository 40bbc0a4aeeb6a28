"""Planning the next optimisation of a task."""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import BaseModel, Field


class Plan(BaseModel):
    """One optimisation step, concrete enough to implement and to measure against."""

    approach: Literal["pallas", "jax"] = Field(description="'pallas' for a custom Pallas kernel, 'jax' for a pure-JAX rewrite")
    strategy: str = Field(description="what to change and why it should be faster, in two to five sentences")
    tiling: dict[str, int] = Field(default_factory=dict,
                                   description="block sizes by name, e.g. {'block_m': 256, 'block_k': 512}; empty for no tiling")
    memory_placement: str = Field(default="", description="what lives where: HBM, VMEM/SMEM (TPU) or shared memory/registers (GPU)")
    pipelining: str = Field(default="", description="how loads overlap compute (grid order, double buffering, num_stages)")
    expected_speedup: float = Field(gt=0, description="expected speedup over the current best, e.g. 1.3")
    risks: list[str] = Field(default_factory=list, description="what could make it wrong or slow")


class PlanOptimization(dspy.Signature):
    """Plan the next optimisation of a JAX computation for the target hardware.

    Read the task analysis (shapes, FLOPs, bytes, arithmetic intensity), the
    hardware spec and the handbook passages; learn from the measured feedback
    and history (what was tried, verdicts, speedups, profiles) and the kernels
    shown (the best so far and the latest failure), and do not repeat a plan
    that was already tried. Propose one concrete step: a Pallas kernel or a
    pure-JAX rewrite, with tiling that divides the shapes and fits on-chip
    memory (the scoped VMEM limit, not the physical VMEM)."""

    task_analysis: str = dspy.InputField(desc="the reference computation: source, shapes, dtypes, FLOPs, bytes, roofline")
    hardware: str = dspy.InputField(desc="the target: peak FLOP/s, HBM bandwidth, on-chip memory sizes, tiling rules")
    passages: str = dspy.InputField(desc="handbook passages retrieved for this task")
    feedback: str = dspy.InputField(desc="the previous round's measured profile and its reading, and notes from a search "
                                         "(what the ancestors and sibling branches tried); empty on the first round")
    history: str = dspy.InputField(desc="one line per earlier iteration: the plan (named by its content), verdict, reason, "
                                        "speedup; newest last; empty when none")
    kernels: str = dspy.InputField(
        desc="the best kernel so far (code, speedup) and the latest failing one (code, verdict, reason); empty when none")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    plan: Plan = dspy.OutputField(desc="the plan for the next step")
