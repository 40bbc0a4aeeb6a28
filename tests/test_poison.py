"""The garbage fill of the TPU interpreter's third check run (mk/harness/poison.py), through the real interpreter."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mk.harness import poison
from mk.targets import get_target


def _read_unwritten_scratch(fill: str) -> np.ndarray:
    """A kernel that copies a VMEM scratch buffer it never wrote into its output, run in the TPU interpreter."""
    def body(x_ref, o_ref, scratch):
        o_ref[...] = scratch[...] + 0.0 * x_ref[...]

    params = get_target("tpu").interpret_params(seed=0, poison=fill)
    x = jnp.ones((8, 128), jnp.float32)
    out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)], interpret=params)(x)
    return np.asarray(out)


def test_unwritten_memory_holds_the_fills_family_and_follows_the_seed():
    poison.seed(1234)
    first = _read_unwritten_scratch(poison.GARBAGE)
    assert np.isfinite(first).all()
    fam = poison.family(poison.GARBAGE)
    if fam == "zeros":
        assert not first.any()
    else:
        assert len(np.unique(first)) > first.size // 2  # not one recognisable value
    poison.seed(1234)
    assert np.array_equal(_read_unwritten_scratch(poison.GARBAGE), first)
    poison.seed(99)
    other = _read_unwritten_scratch(poison.GARBAGE)
    assert not np.array_equal(other, first) or poison.family(poison.GARBAGE) == fam == "zeros"


def test_the_two_fills_of_a_seed_are_different_families_and_every_family_is_drawn():
    seen = set()
    for s in range(40):
        poison.seed(s)
        a, b = poison.family(poison.GARBAGE), poison.family(poison.GARBAGE_SHUFFLED)
        assert a != b and {a, b} <= set(poison.FAMILIES)
        seen |= {a, b}
    assert seen == set(poison.FAMILIES)


def test_each_family_looks_like_itself_in_every_dtype():
    for s in range(40):
        poison.seed(s)
        for fill in poison.FILLS:
            fam = poison.family(fill)
            f = poison.array((64, 128), np.float32, fill)
            i = poison.array((64, 128), np.int32, fill)
            assert np.isfinite(f).all()
            if fam == "zeros":
                assert not f.any() and not i.any()
            elif fam == "bits":  # integers over the whole range, not within +-32768
                assert np.abs(i.astype(np.int64)).max() > 2**20
            elif fam == "normal":
                assert abs(np.mean(f)) < 0.2 * np.std(f) and (np.abs(f) > 2 * np.std(f)).mean() > 0.02  # tails
                assert np.abs(i.astype(np.int64)).max() > 2**20  # float bits read as int32, as stale activations are
            else:  # uniform: integers within +-32768, the one family that draws them there
                assert np.abs(i.astype(np.int64)).max() <= 32768


@pytest.mark.parametrize("fill, check", [("nan", np.isnan), ("zero", lambda a: a == 0)])
def test_upstream_fills_are_unchanged(fill, check):
    poison.install()
    assert check(_read_unwritten_scratch(fill)).all()


def test_values_for_every_dtype_are_finite_and_typed():
    poison.seed(7)
    for dtype in (np.float32, jnp.bfloat16, np.float16, np.int32, np.int8, np.bool_):
        a = poison.array((4, 8), dtype)
        assert a.dtype == np.dtype(dtype) and a.shape == (4, 8)
        if dtype not in (np.bool_,) and not np.issubdtype(np.dtype(dtype), np.integer):
            assert np.isfinite(a.astype(np.float32)).all()
        assert np.asarray(poison.value(dtype)).size == 1
        assert poison.array((4, 8), dtype, poison.GARBAGE_SHUFFLED).shape == (4, 8)


def test_block_padding_holds_varied_values_of_the_fill():
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret, utils

    poison.install()
    for s in range(12):
        poison.seed(s)
        fam = poison.family(poison.GARBAGE)
        padded = np.asarray(utils.pad_to_block_dimension(jnp.ones((3, 5), jnp.float32), (4, 8), poison.GARBAGE))
        assert padded.shape == (4, 8) and (padded[:3, :5] == 1).all()
        tail = np.concatenate([padded[3:].ravel(), padded[:3, 5:].ravel()])
        assert np.isfinite(tail).all()
        assert (not tail.any()) if fam == "zeros" else len(np.unique(tail)) > tail.size // 2  # not one repeated value
        with get_target("tpu").lowering_context("v6e"):  # the padded shape follows the chip's tiling
            shared = tpu_interpret._get_with_padding(np.ones((3, 5), np.float32), poison.GARBAGE)
        assert (shared[:3, :5] == 1).all() and np.isfinite(shared).all()
    assert (np.asarray(utils.pad_to_block_dimension(jnp.ones((3, 5)), (4, 8), "nan"))[3:] != 1).all()  # upstream's
