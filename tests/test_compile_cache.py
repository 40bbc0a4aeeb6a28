"""The chip compiler's results on disk (mk/harness/compile_cache.py): a program compiled once is not compiled again
by another process, and the key holds everything that decides the answer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mk import chips
from mk.harness import chipcheck, compile_cache, pool

needs_libtpu = pytest.mark.skipif(chips.compiler_missing("tpu") is not None, reason="libtpu is not installed")


def _program(n: int) -> bytes:
    from jax import export

    return export.export(jax.jit(lambda x: jnp.tanh(x) * 3.0), platforms=["tpu"])(
        jax.ShapeDtypeStruct((n, 256), jnp.float32)).serialize()


@needs_libtpu
def test_a_compiled_program_comes_back_from_disk_without_a_worker(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "cache"))
    monkeypatch.setattr(chipcheck, "_cache", {})
    chip, blob = chips.get_chip("v6e"), _program(520)
    first, _ = chipcheck.compile_scales(chip, {"ci": blob}, {"ci"}, memory_mb=4096)
    assert first[0].ok and len(list((tmp_path / "cache").glob("*.json"))) == 1

    monkeypatch.setattr(chipcheck, "_cache", {})  # as a new process starts

    def no_worker(*a, **k):
        raise AssertionError("compiled again")

    monkeypatch.setattr(pool, "compiler", no_worker)
    again, _ = chipcheck.compile_scales(chip, {"full": blob}, set(), memory_mb=4096)
    assert again[0].model_dump(exclude={"scale", "judged"}) == first[0].model_dump(exclude={"scale", "judged"})
    assert again[0].scale == "full" and not again[0].judged  # the caller's scale, not the stored one
    with pytest.raises(AssertionError, match="compiled again"):  # another chip is another entry
        chipcheck.compile_scales(chips.get_chip("v5e"), {"ci": blob}, {"ci"}, memory_mb=4096)


def test_the_key_holds_what_decides_the_answer():
    base = dict(program_sha="ab" * 32, chip="v6e", chip_facts={"vmem": 1}, no_spills=False, estimate=False, versions="libtpu 1")
    k = compile_cache.key(**base)
    assert k == compile_cache.key(**base)
    for field, other in [("program_sha", "cd" * 32), ("chip", "v5e"), ("chip_facts", {"vmem": 2}), ("no_spills", True),
                         ("estimate", True), ("versions", "libtpu 2")]:
        assert compile_cache.key(**{**base, field: other}) != k, field


def test_off_keeps_nothing_and_a_torn_entry_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV_VAR, "off")
    compile_cache.store("x", {"a": 1}, "")
    assert compile_cache.folder() is None and compile_cache.load("x") is None
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path))
    compile_cache.store("x", {"a": 1}, "err")
    assert compile_cache.load("x") == ({"a": 1}, "err")
    (tmp_path / "x.json").write_text('{"result": ')
    assert compile_cache.load("x") is None
    monkeypatch.delenv(compile_cache.ENV_VAR)
    monkeypatch.setenv("MK_HOME", str(tmp_path / "home"))
    assert compile_cache.folder() == tmp_path / "home" / "cache" / "compile"


def test_only_the_compilers_own_answers_are_kept():
    assert compile_cache.keepable(True, "")
    assert compile_cache.keepable(True, "Mosaic failed to compile TPU kernel: Used 18M of 16M vmem")
    assert not compile_cache.keepable(False, "")  # a reply without "ok": a failure around the compile
    for text in ("MemoryError", "RESOURCE_EXHAUSTED: out of memory", "mmap error: 12"):
        assert not compile_cache.keepable(True, text)


def test_the_judges_seed_search_is_bounded_by_what_it_reads():
    from mk.harness import program

    huge = program.check_seed([[2**34], [3, 2**40]])  # sizes a lying tracer could report: no 2**34-long draw
    assert isinstance(huge, int)
    assert program.check_seed([["x", True, -5]]) == program.check_seed([[0, 0, 0]])
    assert program.check_seed([[4, 2]]) == program.shuffling_seed([(4, 2)])[0]
