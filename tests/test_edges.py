"""The ``edges`` input distribution and the backward's masked cotangent rows (issue 22, item 3): real data's values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mk.harness.gradient import cotangents
from mk.harness.suite import build_suite
from mk.task import ArgSpec, Init, Scale, Task

TASK = Task("edges_probe", lambda x, w, labels: (x * w).sum(-1) + labels.astype(jnp.float32),
            (ArgSpec("x", ("rows", 64), "float32"), ArgSpec("w", (64,), "bfloat16"),
             ArgSpec("labels", ("rows",), "int32", Init("randint", low=0, high=1000))),
            {"ci": Scale("ci", {"rows": 32})})


def test_floating_inputs_get_zero_rows_and_a_zero_column_but_not_all_zero():
    x, w, _ = TASK.make_inputs("ci", 0, "edges")
    zero_rows = (x == 0).all(axis=1)
    assert 1 <= zero_rows.sum() < x.shape[0]
    assert ((x == 0).all(axis=0)).sum() >= 1  # a whole column
    assert np.isfinite(x).all() and np.count_nonzero(x) > x.size // 8
    half = x.shape[0] // 2  # a run at one end (rank 2: one sequence): whole blocks of rows zero
    assert zero_rows[half:].all() or zero_rows[:half].all()
    assert w.dtype == jnp.bfloat16 and np.count_nonzero(np.asarray(w, np.float32)) < w.size  # rank 1: entries zeroed


def test_integer_inputs_reach_both_ends_of_their_range_and_stay_inside_it():
    labels = TASK.make_inputs("ci", 0, "edges")[2]
    assert labels.min() == 0 and labels.max() == 999
    ends = np.isin(labels, [0, 999]).mean()
    assert 0.2 < ends < 0.8
    assert not np.isin(TASK.make_inputs("ci", 0, "normal")[2], [0, 999]).all()


def test_the_same_seed_gives_the_same_edges_case():
    a, b = TASK.make_inputs("ci", 3, "edges"), TASK.make_inputs("ci", 3, "edges")
    assert all(np.array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32)) for x, y in zip(a, b))


def test_the_default_suite_has_one_edges_case_per_scale():
    suite = build_suite(TASK, heldout=False)
    assert [c.scale for c in suite.cases if c.distribution == "edges"] == ["ci"]


def test_the_scaled_cotangent_is_masked_with_exact_zero_rows_and_its_twin_has_none():
    outs = [jax.ShapeDtypeStruct((4, 16, 32), jnp.float32), jax.ShapeDtypeStruct((32,), jnp.float32)]
    bigs = set()
    for seed in range(12):
        (name, (ct3, ct1)), (_, (un3, _u1)), *_rest, (_, (big3, _b1)) = cotangents(np.random.default_rng(seed), outs)
        zero = [int((ct.reshape(-1, 32) == 0).all(axis=1).sum()) for ct in (ct3, un3, big3)]
        assert zero[0] > 0 and zero[1] == 0, (name, zero)  # always one masked loss and one unmasked, same spread
        bigs.add(zero[2] > 0)
        rows = (ct3.reshape(-1, 32) == 0).all(axis=1)
        assert 1 <= rows.sum() < rows.size, name
        for ct in (ct3, un3, big3):
            assert not (ct == 0).all(axis=(0, 1)).any()  # rows only: no zero column in a cotangent
        assert np.count_nonzero(ct1) == ct1.size  # a rank-1 output's cotangent is left whole
        masked = (ct3 == 0).all(axis=-1)  # (4, 16): per sequence, which tokens are masked
        assert masked[:, 8:].all(axis=1).any()  # some sequence has its last half masked, as a loss mask does
        assert masked[:, :8].all(axis=1).any()  # and some its first half, as a masked prompt
    assert bigs == {True, False}  # whether the large one is masked too is drawn from the seed


def test_a_boolean_mask_gets_whole_rows_off_in_the_edges_case_only():
    """A boolean or 0/1 mask input drawn as coin flips never hides a whole row (a padded sequence, a query that sees
    no key), where a -inf fill makes softmax NaN: the edges case now switches off whole rows, never all of them."""
    task = Task("mask_probe", lambda x, keep, pad: jnp.where(keep, x, 0.0) * pad,
                (ArgSpec("x", (4, 32, 64), "float32"), ArgSpec("keep", (4, 32, 64), "bool", Init("randint", low=0, high=2)),
                 ArgSpec("pad", (4, 64), "int32", Init("randint", low=0, high=2))), {"ci": Scale("ci")})
    _, keep, pad = task.make_inputs("ci", 0, "edges")
    for m in (keep, pad):
        off = ~np.asarray(m, bool).reshape(-1, 64).any(axis=1)
        assert 1 <= off.sum() < off.size
    _, keep, pad = task.make_inputs("ci", 0, "normal")
    assert np.asarray(keep, bool).reshape(-1, 64).any(axis=1).all() and np.asarray(pad, bool).any(axis=1).all()
