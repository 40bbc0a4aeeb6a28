"""Proposing the autotuner's search space for a candidate."""

from __future__ import annotations

import dspy

from mk.signatures.implement import ConfigSpace


class ProposeTuningSpace(dspy.Signature):
    """Propose the values the autotuner should try for the candidate's tunable keyword arguments.

    Use only keyword arguments that `kernel` accepts. Choose values valid for
    the shapes and the hardware (block sizes that divide the dimensions and
    respect the tiling rules, on-chip memory that fits) and keep the product of
    the list lengths small (tens of configurations, not thousands)."""

    code: str = dspy.InputField(desc="the candidate module defining kernel(...)")
    task_analysis: str = dspy.InputField(desc="shapes, dtypes, FLOPs, bytes of the computation")
    hardware: str = dspy.InputField(desc="the target hardware spec and tiling rules")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    config_space: ConfigSpace = dspy.OutputField(desc="keyword argument → list of candidate values")
    rationale: str = dspy.OutputField(desc="why these values, in one or two sentences")
