"""How XLA:CPU compiles programs that are run only to check them.

Without a device the judge runs every correctness case as an interpret-mode program on the CPU at small sizes, and
most of that time is XLA:CPU compiling (LLVM at its default optimisation level) programs it then runs once or twice.
Compiled without LLVM's optimisations they compile in about half the time. Their HLO is the same; their values may
differ in the last bits (measured: up to 8e-6 relative on the small entries of a softmax, 3e-7 on an f32 matmul;
bit-equal on a cumulative sum), which is far inside the judge's tightest tolerance (1e-5), and the reference and the
candidate are always compiled alike.

Measured on this project's 2-core machine (tests/kernels/test_conv.py and test_conv_author.py, 47 tests, -n 2): 124 s
with the default flags, 71 s with these; the fast test tier 258 s -> 197 s (evals/results/test_times.md).

Used only where nothing is timed and nothing is compiled for a chip: the judge's runner and tracer of a device target
with no device present, and the test suite's own interpret-mode runs. A CPU target's timings (``--target cpu``) and
the compile worker's programs for a TPU or GPU are always compiled with the user's own flags: :func:`without`.
"""

from __future__ import annotations

#: XLA flags that make XLA:CPU compile fast (LLVM at -O0, its expensive passes off)
FAST_CPU_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def _split(flags: str | None) -> list[str]:
    return [f for f in (flags or "").split() if f]


def _name(flag: str) -> str:
    return flag.split("=", 1)[0]


def with_fast(flags: str | None) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with :data:`FAST_CPU_FLAGS` added; a flag the caller already set wins."""
    have = {_name(f) for f in _split(flags)}
    return " ".join(_split(flags) + [f for f in FAST_CPU_FLAGS if _name(f) not in have])


def without(flags: str | None) -> str:
    """``flags`` with exactly the flags of :data:`FAST_CPU_FLAGS` removed (a user's own different values stay)."""
    return " ".join(f for f in _split(flags) if f not in FAST_CPU_FLAGS)
