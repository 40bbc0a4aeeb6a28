"""The TPU convolution kernel compiled for real chips without them (the judge's compile stage, mk/harness/chipcheck.py)
at JaxBench's full sizes: blocks planned at trace time for the shapes the kernel is called with fit the chip's scoped
VMEM (v5e: 16 MiB, v6e: 32 MiB). Once the whole sample sat in VMEM per program: 18k at full asked 39.9 MiB, 33k
306 MiB. Skipped where libtpu is not installed (``mk[aot]``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mk import chips
from mk.kernels.conv.tpu import conv_tpu
from tests.kernels.chip_compile import compiled, vmem

pytestmark = pytest.mark.skipif(chips.compiler_missing("tpu") is not None, reason="libtpu is not installed")
S = jax.ShapeDtypeStruct


def _compile(fn, *structs, chip):
    return vmem(compiled(fn, *structs, chip=chip))


def _relu_nchw(t, b):
    return jnp.transpose(jax.nn.relu(t + b), (0, 3, 1, 2))


def _instance_norm(t, b):
    t = t + b
    return jnp.transpose(t - jnp.mean(t, axis=(1, 2), keepdims=True), (0, 3, 1, 2))


@pytest.mark.parametrize("chip", ["v5e", "v6e"])
@pytest.mark.parametrize("case", ["unfused", "rows_independent", "whole_sample"])
def test_conv_at_jaxbench_18k_full_size_compiles(chip, case):
    x, w, b = S((128, 130, 130, 64), jnp.float32), S((3, 3, 64, 128), jnp.float32), S((128,), jnp.float32)
    if case == "unfused":
        fn = lambda x, w, b: conv_tpu(x, w, bias=b)  # noqa: E731
    else:
        ep = _relu_nchw if case == "rows_independent" else _instance_norm
        fn = lambda x, w, b: conv_tpu(x, w, b, epilogue=ep, rows_independent=case == "rows_independent")  # noqa: E731
    vmem = _compile(fn, x, w, b, chip=chip)
    scoped = chips.get_chip(chip).scoped_vmem_limit
    if case != "whole_sample":  # the whole-sample tile (8 MiB here) raises the kernel's limit instead
        assert vmem and all(v <= scoped for v in vmem), (vmem, scoped)


@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_conv3d_at_jaxbench_33k_full_size_compiles(chip):
    x, w = S((16, 34, 66, 66, 32), jnp.float32), S((3, 3, 3, 32, 64), jnp.float32)
    _compile(lambda x, w: conv_tpu(x, w), x, w, chip=chip)
