"""Implementing a kernel from a plan."""

from __future__ import annotations

import inspect

import dspy

from mk.signatures.contract import CONTRACT
from mk.signatures.plan import Plan

ConfigSpace = dict[str, list[int | float | str | bool]]


class ImplementKernel(dspy.Signature):
    __doc__ = inspect.cleandoc("""Write the candidate: a complete Python module that implements the plan.

    The module defines `kernel(*inputs, **tunables)` with the reference's
    positional arguments and returns the same outputs (shapes, dtypes, values
    within tolerance). Tunables are keyword arguments with defaults; list their
    candidate values in CONFIG_SPACE. Import what you use (jax, jax.numpy,
    jax.experimental.pallas ...). Start from the hardware brief's skeleton when
    it fits. When earlier kernels are given, build on the best one and do not
    repeat what made the latest one fail.""") + "\n\n" + CONTRACT

    task_analysis: str = dspy.InputField(desc="the reference computation: source, shapes, dtypes, FLOPs, bytes")
    plan: Plan = dspy.InputField(desc="the optimisation to implement")
    hardware: str = dspy.InputField(desc="the target hardware spec and tiling rules")
    passages: str = dspy.InputField(desc="handbook passages: Pallas API, examples, pitfalls")
    kernels: str = dspy.InputField(
        desc="the best kernel so far (code, speedup) and the latest failing one (code, verdict, reason); empty on the first try")
    previous_error: str = dspy.InputField(desc="why your previous answer was rejected; fix that now. Empty on the first try")
    code: str = dspy.OutputField(desc="the full Python module defining kernel(...); no markdown fences")
    config_space: ConfigSpace = dspy.OutputField(
        desc="tunable keyword arguments of kernel and their candidate values, e.g. {'block_m': [128, 256]}; {} when none")
