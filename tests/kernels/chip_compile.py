"""Compile a mk kernel for a real GPU without the GPU (the judge's compile stage, mk/harness/chipcheck.py): the
regression tests of kernels whose blocks once outgrew H100's shared memory, registers or Triton's block limit.

``compiled(fn, *structs)`` exports ``jax.jit(fn)`` for cuda as the judge's tracer does and compiles it for H100 with
XLA's CUDA pipeline and ptxas; ``fits(result)`` asserts it compiled with every Pallas kernel within the chip's shared
memory and without spills. Tests using them are skipped where the CUDA compiler is not installed (``mk[aot]``)."""

from __future__ import annotations

import jax
import pytest
from jax import export

from mk import chips
from mk.harness.results import CompileResult

needs_cuda = pytest.mark.skipif(chips.compiler_missing("gpu") is not None, reason="the CUDA compiler is not installed")


def compiled(fn, *structs, chip: str = "h100") -> CompileResult:
    from mk.harness import chipcheck
    from mk.harness.process import default_memory_limit_mb
    from mk.targets import get_target

    tgt = get_target("gpu")
    checks = [export.DisabledSafetyCheck.custom_call(t) for t in sorted(tgt.kernel_calls)]
    with tgt.lowering_context(chip):
        blob = export.export(jax.jit(fn), platforms=[tgt.platform], disabled_checks=checks)(*structs).serialize()
    results, _ = chipcheck.compile_scales(chips.get_chip(chip), {"test": blob}, set(),
                                          memory_mb=default_memory_limit_mb(), strict=False)
    assert results, "the compile did not finish"
    return results[0]


def fits(result: CompileResult) -> list:
    """The Pallas kernels' figures, after asserting the program compiled, within shared memory and without spills."""
    assert result.ok, result.error
    kernels = [k for k in result.kernels if k.kind == "pallas"]
    assert kernels, result.kernels
    limit = result.limits["shared_memory_per_block_bytes"]
    for k in kernels:
        assert (k.shared_memory_bytes or 0) <= limit, k
        assert not (k.spill_store_bytes or k.spill_load_bytes), k
    return kernels
