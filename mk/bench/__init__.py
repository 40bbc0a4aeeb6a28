"""``mk bench``: run a suite of tasks with one or more methods and report the MaxKernel paper's metrics.

Metrics: :mod:`mk.bench.metrics`; methods (auto, best-of-n, search): :mod:`mk.bench.methods`;
the runner and store rows: :mod:`mk.bench.runner`, :mod:`mk.bench.record`; the markdown + PNG
report: :mod:`mk.bench.report`.
"""

from mk.bench.metrics import FAST_P, Metrics, TaskOutcome, compute_metrics, fast_p, fast_p_curve, geomean_floored
from mk.bench.results import METHODS, BenchResult, Step, TaskRow
from mk.bench.runner import BenchConfig, run_bench

__all__ = ["FAST_P", "METHODS", "BenchConfig", "BenchResult", "Metrics", "Step", "TaskOutcome", "TaskRow", "compute_metrics",
           "fast_p", "fast_p_curve", "geomean_floored", "run_bench"]
