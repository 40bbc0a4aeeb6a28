"""The tracer's record of the lowering tables (mk/harness/lowerings.py): what counts as a change, and what does not.

Every test works on copies of JAX's tables (monkeypatched in, restored after), never on the tables other tests use.
"""

from __future__ import annotations

import collections
import functools

import jax
import pytest
from jax._src import core as jcore
from jax._src.interpreters import mlir

from mk.harness import lowerings


@pytest.fixture
def tables(monkeypatch):
    """Private copies of JAX's two tables, recorded."""
    monkeypatch.setattr(mlir, "_lowerings", dict(mlir._lowerings))
    per_platform = collections.defaultdict(dict, {k: dict(v) for k, v in mlir._platform_specific_lowerings.items()})
    monkeypatch.setattr(mlir, "_platform_specific_lowerings", per_platform)
    return lowerings.snapshot(None)


def test_unchanged_tables_are_not_a_change(tables):
    assert lowerings.changed(tables) is None


def test_a_rule_registered_for_one_platform_is_named(tables):
    mlir.register_lowering(jax.lax.neg_p, mlir.lower_fun(lambda v: v * -1.01, multiple_results=False), platform="tpu")
    assert lowerings.changed(tables) == ("a lowering rule was registered in jax._src.interpreters.mlir."
                                         "_platform_specific_lowerings for neg (on tpu)")


def test_a_replaced_or_removed_rule_is_a_change(tables):
    mlir._lowerings[jax.lax.sin_p] = mlir._lowerings[jax.lax.cos_p]
    assert "for sin was replaced" in lowerings.changed(tables)


def test_a_removed_rule_is_a_change(tables):
    del mlir._lowerings[jax.lax.sin_p]
    assert "for sin was removed" in lowerings.changed(tables)


def test_a_rule_rewritten_in_place_is_a_change(tables, monkeypatch):
    """The same entry object, its function's code swapped (or a partial's arguments changed)."""
    entry = mlir._lowerings[jax.lax.tanh_p]
    fn = entry.rule.func if isinstance(entry.rule, functools.partial) else entry.rule
    monkeypatch.setattr(fn, "__code__", (lambda *a, **k: None).__code__)
    found = lowerings.changed(tables)  # the function may serve several primitives: the first one found is named
    assert found is not None and found.endswith("was replaced or rewritten")


def test_a_new_primitive_from_jax_itself_is_not_a_change_but_the_candidates_is(tables, monkeypatch):
    from jax._src.lax import lax as jax_lax

    jax_own = jcore.Primitive("mk_test_jax_own")
    monkeypatch.setattr(jax_lax, "mk_test_jax_own_p", jax_own, raising=False)  # as a JAX module imported later defines it
    mlir.register_lowering(jax_own, mlir._lowerings[jax.lax.neg_p].rule)  # code in JAX's package
    assert lowerings.changed(tables) is None
    made_here = jcore.Primitive("mk_test_made_here")  # JAX's rule, but a primitive no JAX module defines
    mlir.register_lowering(made_here, mlir._lowerings[jax.lax.neg_p].rule, platform="tpu")
    assert "for mk_test_made_here" in lowerings.changed(tables)
    del mlir._platform_specific_lowerings["tpu"][made_here]
    monkeypatch.setattr(jax_lax, "mk_test_candidates_p", jcore.Primitive("mk_test_candidates"), raising=False)
    mlir.register_lowering(jax_lax.mk_test_candidates_p, lambda ctx, x: [x])  # code in this file
    assert "for mk_test_candidates" in lowerings.changed(tables)


def test_code_is_followed_through_what_a_rule_carries():
    from functools import partial

    rule = mlir._lowerings[jax.lax.neg_p].rule
    assert lowerings._from_library(rule) and lowerings._from_library(partial(rule, 1))
    assert not lowerings._from_library(mlir.lower_fun(lambda x: x, multiple_results=False))  # lower_fun around ours

    class Base:
        def __call__(self, *args):
            return args

    class Rule(Base):  # __call__ inherited
        pass

    class Made:
        def __new__(cls, *args):
            return args

    assert not lowerings._from_library(Rule()) and not lowerings._from_library(Made)
    assert not lowerings._from_library(partial(rule, helper=[{"f": lambda: 0}]))  # inside containers too


def test_a_replaced_table_is_a_change(tables, monkeypatch):
    monkeypatch.setattr(mlir, "_lowerings", dict(mlir._lowerings))
    assert lowerings.changed(tables) == "jax._src.interpreters.mlir._lowerings was replaced"


def test_the_pallas_backends_are_imported_before_the_record():
    """A backend's modules register rules when first imported; the record is taken after all of them are."""
    snap = lowerings.snapshot("mosaic")
    assert "jax._src.pallas.mosaic.lowering.lowering_rules" in snap
    import jax._src.pallas.mosaic.pallas_call_registration  # noqa: F401
    import jax._src.pallas.mosaic.sc_primitives  # noqa: F401

    assert lowerings.changed(snap) is None
