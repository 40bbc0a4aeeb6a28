"""Compile a mk kernel for a real chip without the chip (the judge's compile stage, mk/harness/chipcheck.py): the
regression tests of kernels whose blocks once outgrew a TPU's scoped VMEM, H100's shared memory, registers or
Triton's block limit.

``compiled(fn, *structs, chip=...)`` exports ``jax.jit(fn)`` for the chip's platform as the judge's tracer does
(TPU: lowered assuming the chip) and compiles it (libtpu for a TPU topology; XLA's CUDA pipeline and ptxas for a
GPU); ``fits(result)`` asserts a GPU program compiled with every Pallas kernel within the chip's shared memory and
without spills; ``vmem(result)`` asserts a TPU program compiled and gives each Pallas kernel's scoped VMEM. Tests
using them are skipped where the compiler is not installed (``mk[aot]``)."""

from __future__ import annotations

import pytest

from mk import chips
from mk.harness.results import CompileResult

needs_cuda = pytest.mark.skipif(chips.compiler_missing("gpu") is not None, reason="the CUDA compiler is not installed")
needs_libtpu = pytest.mark.skipif(chips.compiler_missing("tpu") is not None, reason="libtpu is not installed")


def compiled(fn, *structs, chip: str = "h100") -> CompileResult:
    from mk.harness import chipcheck

    return chipcheck.compile_function(fn, *structs, chip=chip, scale="test")


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


def vmem(result: CompileResult) -> list:
    """Each Pallas kernel's scoped VMEM, after asserting the TPU program compiled (within the limit the kernel set,
    which may be above the chip's default: ``vmem_limit_bytes``)."""
    assert result.ok, result.error
    found = [k.scoped_vmem_bytes for k in result.kernels if k.kind == "pallas"]
    assert found, result.kernels
    return found
