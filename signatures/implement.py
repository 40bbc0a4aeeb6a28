"""Implementing a kernel from a plan."""

from __future__ import annotations

import dspy

from mk.signatures.plan import Plan

ConfigSpace = dict[str, list[int | float | str | bool]]


class ImplementKernel(dspy.Signature):
    """Write the candidate: a complete Python module that implements the plan.

    The module defines `kernel(*inputs, **tunables)` with the reference's
    positional arguments and returns the same outputs (shapes, dtypes, values
    within tolerance). Tunables are keyword arguments with defaults; list their
    candidate values in CONFIG_SPACE. Import what you use (jax, jax.numpy,
    jax.experimental.pallas ...). No I/O, no timing, no prints."""

    task_analysis: str = dspy.InputField(desc="the reference computation: source, shapes, dtypes, FLOPs, bytes")
    plan: Plan = dspy.InputField(desc="the optimisation to implement")
    hardware: str = dspy.InputField(desc="the target hardware spec and tiling rules")
    passages: str = dspy.InputField(desc="handbook passages: Pallas API, examples, pitfalls")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    code: str = dspy.OutputField(desc="the full Python module defining kernel(...); no markdown fences")
    config_space: ConfigSpace = dspy.OutputField(
        desc="tunable keyword arguments of kernel and their candidate values, e.g. {'block_m': [128, 256]}; {} when none")
