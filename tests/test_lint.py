"""The linters pyproject configures pass: ruff ([tool.ruff]: pyflakes and syntax errors) on mk's code, programs and
tests, and mypy ([tool.mypy]) strict on the typed modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "mk", "programs", "signatures",
                           "retrievers", "evals", "tests"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_mypy_strict_on_the_typed_modules():
    """pyproject's [tool.mypy] files (the contracts, the judge's shared steps, the run service's typed pieces)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "Success" in done.stdout, (done.stdout + done.stderr)[-4000:]
