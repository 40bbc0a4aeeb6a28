"""Typed DSPy signatures, one per sub-agent decision; each docstring is the instruction."""

from mk.signatures.fix import FixCompileError
from mk.signatures.implement import ConfigSpace, ImplementKernel
from mk.signatures.plan import Plan, PlanOptimization
from mk.signatures.profile import AnalyzeProfile, ProfileAnalysis
from mk.signatures.synthesize_tests import EdgeCase, SynthesizeTests, TestCase
from mk.signatures.tuning import ProposeTuningSpace

__all__ = [
    "AnalyzeProfile",
    "ConfigSpace",
    "EdgeCase",
    "FixCompileError",
    "ImplementKernel",
    "Plan",
    "PlanOptimization",
    "ProfileAnalysis",
    "ProposeTuningSpace",
    "SynthesizeTests",
    "TestCase",
]
