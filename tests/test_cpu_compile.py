"""XLA:CPU's fast compile settings for interpret-mode checking (mk/harness/cpu_compile.py): where the judge uses
them and where it must not (a CPU target's timed runs, the chip compiler)."""

from __future__ import annotations

import pytest

from mk.harness import compiler, cpu_compile
from mk.harness.evaluate import _child_env
from mk.targets import get_target

FAST = " ".join(cpu_compile.FAST_CPU_FLAGS)


def test_with_fast_adds_the_flags_once_and_keeps_the_users():
    assert cpu_compile.with_fast(None) == FAST
    assert cpu_compile.with_fast(cpu_compile.with_fast("--xla_dump_to=/d")) == f"--xla_dump_to=/d {FAST}"
    # a value the user chose for one of the flags wins
    assert cpu_compile.with_fast("--xla_backend_optimization_level=2").split() == [
        "--xla_backend_optimization_level=2", "--xla_llvm_disable_expensive_passes=true"]


def test_without_removes_exactly_the_fast_flags():
    assert cpu_compile.without(f"--xla_dump_to=/d {FAST}") == "--xla_dump_to=/d"
    assert cpu_compile.without("--xla_backend_optimization_level=2") == "--xla_backend_optimization_level=2"
    assert cpu_compile.without(None) == ""


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_a_device_target_checked_on_the_cpu_compiles_fast(monkeypatch, target):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/d")
    env = _child_env(get_target(target), device=False)
    assert env == {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_dump_to=/d {FAST}"}
    assert _child_env(get_target(target), device=True) == {}  # on the device: the user's own environment


def test_a_cpu_target_is_timed_so_it_compiles_with_the_users_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to=/d {FAST}")
    assert _child_env(get_target("cpu"), device=True) == {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_dump_to=/d"}
    monkeypatch.delenv("XLA_FLAGS")
    assert _child_env(get_target("cpu"), device=False) == {"JAX_PLATFORMS": "cpu"}


def test_the_chip_compiler_never_gets_the_fast_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("XLA_FLAGS", FAST)
    assert compiler.environment("tpu", tmp_path)["XLA_FLAGS"] == ""
    assert "optimization_level" not in compiler.environment("gpu", tmp_path)["XLA_FLAGS"]
