import json
from importlib import resources

import pytest

from mk.errors import TargetError
from mk.hardware import (
    HardwareSpec,
    bound,
    default_spec,
    get_spec,
    load_specs,
    roofline_fraction,
    roofline_seconds,
    spec_for_device_kind,
)

REQUIRED = {"v4", "v5e", "v5p", "v6e", "v7x", "h100", "h200", "b200", "cpu"}


def test_table_ships_every_required_entry_with_sources():
    specs = load_specs()
    assert REQUIRED <= set(specs)
    raw = json.loads(resources.files("mk.data").joinpath("hardware.json").read_text())
    names = [e["name"] for e in raw["specs"]]
    assert len(names) == len(set(names))
    for spec in specs.values():
        assert spec.peak("bfloat16") > 0 and spec.hbm_bandwidth > 0
        if spec.kind == "cpu":
            assert spec.approximate and spec.notes
            continue
        assert spec.sources and all(s.url.startswith("https://") for s in spec.sources)
        assert spec.hbm_bytes and spec.cores
        if spec.kind == "tpu":
            assert spec.vmem_bytes and spec.smem_bytes and spec.mxu_size in (128, 256)
        else:
            assert spec.shared_mem_per_sm_bytes and spec.l2_bytes and spec.peak_flops.get("float32")


def test_tpu_figures_are_consistent_with_vendor_ratios():
    s = load_specs()
    assert s["v6e"].peak("bfloat16") == pytest.approx(918e12)
    assert s["v5e"].peak("bfloat16") == pytest.approx(197e12)
    assert s["v6e"].hbm_bandwidth == pytest.approx(2 * s["v5e"].hbm_bandwidth, rel=0.01)
    assert s["h200"].peak("bfloat16") == s["h100"].peak("bfloat16") and s["h200"].hbm_bandwidth > s["h100"].hbm_bandwidth
    assert s["v7x"].device_peak_flops() == pytest.approx(s["v7x"].peak() / 2)


@pytest.mark.parametrize(
    "name,expected",
    [("v6e", "v6e"), ("TPU v6 lite", "v6e"), ("Trillium", "v6e"), ("tpu-v4", "v4"), ("TPU_v5e", "v5e"),
     ("NVIDIA H200", "h200"), ("nvidia h100", "h100"), ("Ironwood", "v7x"), ("B200", "b200"), ("cpu", "cpu")],
)
def test_get_spec_aliases(name, expected):
    assert get_spec(name).name == expected


def test_unknown_spec_names_the_known_ones():
    with pytest.raises(TargetError, match="v6e"):
        get_spec("tpu v99")


@pytest.mark.parametrize(
    "kind,expected",
    [("TPU v4", "v4"), ("TPU v5 lite", "v5e"), ("TPU v5", "v5p"), ("TPU v6 lite", "v6e"), ("TPU7x", "v7x"),
     ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"), ("cpu", "cpu"),
     ("NVIDIA H100 PCIe", None), ("NVIDIA A100-SXM4-80GB", None), ("TPU v3", None)],
)
def test_spec_for_device_kind(kind, expected):
    got = spec_for_device_kind(kind)
    assert (got.name if got else None) == expected


def test_defaults():
    assert default_spec("tpu").name == "v6e" and default_spec("gpu").name == "h200" and default_spec("cpu").name == "cpu"
    with pytest.raises(TargetError):
        default_spec("npu")


def test_roofline_arithmetic():
    v6e = get_spec("v6e")
    n = 8192
    flops, nbytes = 2 * n**3, 3 * n * n * 2
    assert roofline_seconds(flops, nbytes, v6e) == pytest.approx(flops / 918e12)
    assert bound(flops, nbytes, v6e) == "compute"
    # an elementwise add of two 1M-element bf16 vectors is memory-bound everywhere
    assert bound(1e6, 6e6, "v6e") == "memory" and bound(1e6, 6e6, "h200") == "memory"
    assert roofline_seconds(1e6, 6e6, "h200") == pytest.approx(6e6 / 4.8e12)
    floor = roofline_seconds(flops, nbytes, v6e)
    assert roofline_fraction(2 * floor, flops, nbytes, v6e) == pytest.approx(0.5)
    # per device: a v7x device is half a chip
    assert roofline_seconds(1e6, 7.38e9, "v7x") == pytest.approx(2e-3)
    with pytest.raises(TargetError):
        roofline_seconds(-1, 0, v6e)
    with pytest.raises(TargetError, match="positive"):
        roofline_fraction(0.0, flops, nbytes, v6e)


def test_dtype_fallbacks_are_lower_bounds():
    v6e, h200 = get_spec("v6e"), get_spec("h200")
    assert v6e.peak("float32") == v6e.peak("bfloat16")  # unpublished: f32 matmuls run as bf16 passes
    assert h200.peak("float32") < h200.peak("tfloat32") < h200.peak("bfloat16")
    assert h200.peak("float8_e4m3fn") == h200.peak("float8")
    assert v6e.peak("bf16") == v6e.peak("bfloat16")
    with pytest.raises(TargetError, match="float64"):
        v6e.peak("float64")


def test_cpu_placeholder_refuses_roofline_claims():
    cpu = get_spec("cpu")
    assert roofline_seconds(1e9, 1e9, cpu) > 0  # an estimate is allowed
    with pytest.raises(TargetError, match="placeholder"):
        roofline_fraction(1.0, 1e9, 1e9, cpu)
    measured = cpu.model_copy(update={"peak_flops": {"float32": 2e12, "bfloat16": 2e12}, "hbm_bandwidth": 5e10, "approximate": False})
    assert isinstance(measured, HardwareSpec)
    assert roofline_fraction(1.0, 1e9, 5e10, measured) == pytest.approx(1.0)


def test_kernel_vmem_budget_is_the_scoped_default_not_the_physical_vmem():
    """Default blocks plan for the VMEM a kernel gets without vmem_limit_bytes (XLA's scoped default), with headroom:
    blocks sized to v5e's physical 128 MiB would fail Mosaic's scoped-allocation check on the chip."""
    from mk.hardware import get_spec
    from mk.kernels.validate import VMEM_SHARE, vmem_budget

    for chip, scoped in (("v5e", 16 << 20), ("v6e", 32 << 20), ("v7x", 32 << 20)):
        spec = get_spec(chip)
        assert spec.scoped_vmem_default_bytes == scoped < spec.vmem_bytes
        assert vmem_budget(spec) == int(scoped * VMEM_SHARE)
    assert vmem_budget(get_spec("v4")) <= get_spec("v4").vmem_bytes
