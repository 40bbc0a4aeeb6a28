"""Benchmarks and evaluations of mk (run from the repository root: python -m evals.<name>)."""
