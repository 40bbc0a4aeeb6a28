"""The offline author's conv recogniser: it binds the task's epilogue to mk.kernels.conv, writes a standalone file
(the kernel module copied in, the static check passed, no mk import), and the file is right at sizes it never saw."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from mk.author import OfflineAuthor, conv
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.targets import get_target


def _ci(name):
    task = load_task(f"jaxbench:{name}")
    return task.with_scales({"ci": task.scale("ci")})


def _propose(name, target):
    """The task and the conv template's default proposal (the fused epilogue)."""
    task = _ci(name)
    return task, conv.propose(task, trace_scales(task), target)[0]


def _at(task, **dims):
    """The task at a size the author never traced: its ci dims with some moved."""
    ci = task.scale("ci")
    return task.with_scales({"ci": dataclasses.replace(ci, dims={**ci.dims, **dims})})


def _judge_here(task, source, target):
    ns = {}
    exec(compile(source, "candidate", "exec"), ns)
    xs = task.make_inputs("ci", 1, "normal")
    want = np.asarray(task.bind(task.reference, "ci")(*xs), np.float32)
    with get_target(target).execution():
        got = np.asarray(jax.jit(task.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
    atol, rtol = task.tolerance.for_output(0)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("name,target,dims", [
    ("22k_Conv2d_InstanceNorm_Divide", "tpu", {"H": 7, "W": 12, "Cout": 16}),   # a mean over (H-2)*(W-2) pixels
    ("39k_Conv2d_GELU_GlobalAvgPool", "gpu", {"H": 13, "W": 6, "Cout": 24}),   # padded tile, masked pooling
])
def test_written_kernel_is_standalone_and_general(name, target, dims):
    task, prop = _propose(name, target)
    assert prop.template == "conv" and prop.name == f"conv-epilogue-{target}"
    assert "import mk" not in prop.source and "from mk" not in prop.source
    assert f"def conv_{target}(" in prop.source and "(H - 2) * (W - 2)" in prop.source  # no baked pixel count
    assert check_source(prop.source, target=target, require_pallas=True).ok
    _judge_here(_at(task, **dims), prop.source, target)


def test_group_norm_epilogue_on_tpu_and_declines_with_reasons():
    task, prop = _propose("46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp", "tpu")
    assert "reshape" in prop.rationale and "CONFIG_SPACE = {'unroll'" in prop.source
    bn, split = _propose("34k_Conv2d_Activation_BatchNorm", "gpu")  # training-mode BatchNorm mixes samples:
    assert "def _tail(y" in split.source and "after the kernel in XLA" in split.rationale  # its statistics run after
    _judge_here(_at(bn, N=3, H=9, W=8, Cout=24), split.source, "gpu")
    # 28k (a transposed conv: a dilated input) is written now: tests/kernels/test_conv.py


@pytest.mark.parametrize("name,dims", [
    ("46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp", {"Cout": 48, "H": 7, "W": 12}),  # 16 groups of 3
    ("25k_Conv3d_GroupNorm_Mean", {"Cout": 40, "H": 5}),  # 8 groups of 5, a 3-D tile padded on every axis
    ("25k_Conv3d_GroupNorm_Mean", {"Cout": 8}),  # groups of 1: padded to 16 groups (Triton's smallest dot)
])
def test_group_norm_on_a_padded_triton_tile(name, dims):
    """Channels padded group by group: the epilogue splits the padded axis into groups and masks each group's
    padding, and the reductions over all channels mask the padding inside and after the groups."""
    task, prop = _propose(name, "gpu")
    assert re.search(r"channel_groups=\(\d+, \(", prop.source) and "_masked_groups(" in prop.source
    _judge_here(_at(task, **dims), prop.source, "gpu")


def test_offline_author_offers_the_conv_template():
    task = _ci("18k_Conv2D_ReLU_BiasAdd")
    out = OfflineAuthor().propose(task, "gpu")
    assert [p.name for p in out.proposals] == ["conv-epilogue-gpu", "conv-xla-epilogue-gpu"]
    assert "conv" not in out.declined
    assert "convolution" in OfflineAuthor().propose(_ci("8p_GEMM"), "tpu").declined["conv"]


@pytest.mark.parametrize("name,target,dims", [
    ("18k_Conv2D_ReLU_BiasAdd", "tpu", {"H": 9, "W": 11}),
    ("46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp", "gpu", {"Cout": 48, "H": 7}),
    ("34k_Conv2d_Activation_BatchNorm", "tpu", {"N": 3, "Cout": 24}),  # the fused variant splits at the BatchNorm
])
def test_every_variant_is_right_at_a_size_it_never_saw(name, target, dims):
    """The fused epilogue and the epilogue in XLA after a channel-tiled kernel: distinct names and plan texts,
    each right in interpret mode."""
    task = _ci(name)
    props = conv.propose(task, trace_scales(task), target)
    assert [p.name for p in props] == [f"conv-epilogue-{target}", f"conv-xla-epilogue-{target}"]
    assert "fused per sample" in props[0].rationale and "runs in XLA on whole arrays" in props[1].rationale
    assert "def _epilogue(y" in props[1].source and "epilogue=" not in props[1].source.split("def kernel(")[1]
    for prop in props:
        assert check_source(prop.source, target=target, require_pallas=True).ok
        _judge_here(_at(task, **dims), prop.source, target)
