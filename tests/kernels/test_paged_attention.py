"""mk.kernels.paged_attention: the TPU (scalar prefetch) and GPU (Triton) kernels match the reference in interpret
mode over scattered pages and ragged lengths (GQA and MHA, f32 and bf16, shapes Triton must pad) and lower for their
target; pages past a sequence's length are never read."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import paged_attention as pa
from mk.targets import get_target


def _inputs(n, hq, hkv, d, page, pages, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((n, hq, d)), dtype)
    kp = jnp.asarray(rng.standard_normal((n * pages, page, hkv, d)), dtype)
    vp = jnp.asarray(rng.standard_normal((n * pages, page, hkv, d)), dtype)
    lengths = jnp.asarray(rng.integers(1, page * pages + 1, size=n), jnp.int32)
    table = jnp.asarray(rng.permutation(n * pages).reshape(n, pages), jnp.int32)
    return q, kp, vp, lengths, table


CASES = [(3, 8, 2, 128, 16, 6, jnp.bfloat16), (2, 4, 4, 64, 8, 5, jnp.float32), (2, 6, 2, 48, 12, 3, jnp.float32)]


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[0]}h{c[1]}kv{c[2]}d{c[3]}p{c[4]}x{c[5]}")
def test_matches_reference(target, case):
    *dims, dtype = case
    args = _inputs(*dims, dtype)
    d = dims[3]
    want = np.asarray(pa.reference(*args, scale=d ** -0.5), np.float32)
    fn = lambda *a: pa.paged_attention(*a, target=target, scale=d ** -0.5,  # noqa: E731
                                       config=pa.Config(pages_per_block=2))
    with get_target(target).execution():
        got = np.asarray(jax.jit(fn)(*args), np.float32)
    tol = 2e-2 if dtype == jnp.bfloat16 else 2e-4
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    get_target(target).lower(fn, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in args])


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_pages_past_the_length_are_not_read(target):
    q, kp, vp, lengths, table = _inputs(2, 4, 2, 128, 16, 4, jnp.float32, seed=1)
    lengths = jnp.asarray([20, 33], jnp.int32)  # 2 and 3 pages used
    fn = jax.jit(lambda *a: pa.paged_attention(*a, target=target, scale=0.1, config=pa.Config(pages_per_block=1)))
    with get_target(target).execution():
        clean = np.asarray(fn(q, kp, vp, lengths, table))
        unused = np.asarray(table)[[0, 0, 1], [2, 3, 3]]
        kp2, vp2 = (x.at[unused].set(jnp.nan) for x in (kp, vp))
        poisoned = np.asarray(fn(q, kp2, vp2, lengths, table))
    np.testing.assert_array_equal(poisoned, clean)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_an_empty_sequence_gives_zeros_not_nan(target):
    """A length of 0 (a free slot in a serving batch) reads no page: zeros for that sequence, the others unchanged
    (a kernel-engineer attack: 0/0 gave NaN)."""
    q, kp, vp, lengths, table = _inputs(3, 4, 2, 64, 8, 4, jnp.float32, seed=2)
    lengths = lengths.at[1].set(0)
    want = np.asarray(pa.reference(q, kp, vp, lengths, table, scale=0.125), np.float32)
    with get_target(target).execution():
        got = np.asarray(jax.jit(lambda *a: pa.paged_attention(*a, target=target, scale=0.125,
                                                               config=pa.Config(pages_per_block=2)))(
            q, kp, vp, lengths, table), np.float32)
    assert np.isfinite(got).all() and not got[1].any()
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], atol=2e-4, rtol=2e-4)


def test_config_validates():
    with pytest.raises(ValueError):
        pa.Config(pages_per_block=0)
    shapes = pa.Shapes(64, 64, 8, 128, 16, 256)
    assert pa.default("v6e", shapes).pages_per_block >= 1 and pa.space("tpu", shapes)["pages_per_block"]
