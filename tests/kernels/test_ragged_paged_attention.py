"""mk.kernels.ragged_paged_attention: the TPU (scalar prefetch, manual page DMAs) and GPU (Triton) kernels match the
reference in interpret mode over scattered pages at several ragged layouts (decode only, prefill only, mixed, a
sequence whose kv_len is its q_len, empty trailing slots, num_seqs below the filled prefix, rows past the last
sequence), f32 and bf16, GQA and MHA, and lower for their target; pages past a sequence's length are never read;
the reference matches the 7p task's own reference."""

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import ragged_paged_attention as rpa
from mk.targets import get_target


def _inputs(q_lens, kv_lens, *, slots, num_seqs=None, tokens=None, hq=4, hkv=2, d=128, page=8, pages=4,
            dtype=jnp.float32, seed=0):
    """A ragged batch: sequence i has q_lens[i] query rows and kv_lens[i] kv slots; ``slots`` sequences in the
    tables (the rest empty), ``num_seqs`` of them active (default all of q_lens), ``tokens`` rows (default the sum)."""
    rng = np.random.default_rng(seed)
    tokens = sum(q_lens) if tokens is None else tokens
    q = jnp.asarray(rng.standard_normal((tokens, hq, d)), dtype)
    kv = jnp.asarray(rng.standard_normal((slots * pages, page, 2 * hkv, d)), dtype)
    lens = np.zeros(slots, np.int32)
    lens[:len(kv_lens)] = kv_lens
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu = np.concatenate([cu, np.full(slots + 1 - len(cu), cu[-1], np.int32)])
    table = rng.permutation(slots * pages).astype(np.int32).reshape(slots, pages)
    ns = np.array([len(q_lens) if num_seqs is None else num_seqs], np.int32)
    return q, kv, jnp.asarray(lens), jnp.asarray(table), jnp.asarray(cu), jnp.asarray(ns)


LAYOUTS = {  # name -> (q_lens, kv_lens, keyword arguments of _inputs)
    "decode": ([1, 1, 1, 1], [5, 40, 17, 1], {"slots": 4}),  # 40 > 4 pages of 8: the table's 32 slots
    "prefill": ([12, 9], [12, 30], {"slots": 2}),  # the first: kv_len == q_len (plain causal)
    "mixed_trailing": ([1, 1, 10, 7], [20, 3, 25, 7], {"slots": 6}),  # two empty trailing slots
    "num_seqs_below": ([1, 6, 5, 3], [9, 14, 32, 8], {"slots": 4, "num_seqs": 2}),  # rows of seqs 2, 3: zero
    "rows_past_last": ([2, 5], [11, 6], {"slots": 3, "tokens": 12}),  # 5 rows no sequence owns
}
CASES = [("decode", jnp.float32, {}), ("prefill", jnp.bfloat16, {}), ("mixed_trailing", jnp.float32, {"hq": 2}),
         ("mixed_trailing", jnp.bfloat16, {"hq": 6, "hkv": 2}), ("num_seqs_below", jnp.float32, {}),
         ("rows_past_last", jnp.bfloat16, {}),
         ("mixed_trailing", jnp.float32, {"hq": 6, "hkv": 3, "d": 64, "page": 12})]  # Triton pads the page


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("case", CASES,
                         ids=lambda c: f"{c[0]}-{jnp.dtype(c[1]).name}-{'-'.join(map(str, c[2].values()))}")
def test_matches_reference(target, case):
    name, dtype, extra = case
    q_lens, kv_lens, kw = LAYOUTS[name]
    args = _inputs(q_lens, kv_lens, dtype=dtype, **kw, **extra)
    scale = args[0].shape[2] ** -0.5
    want = np.asarray(rpa.reference(*args, scale=scale), np.float32)
    fn = lambda *a: rpa.ragged_paged_attention(*a, target=target, scale=scale,  # noqa: E731
                                               config=rpa.Config(block_q=4, pages_per_block=2))
    with get_target(target).execution():
        got = np.asarray(jax.jit(fn)(*args), np.float32)
    tol = 2e-2 if dtype == jnp.bfloat16 else 2e-4
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    if name == "num_seqs_below":
        assert not got[7:].any()  # the inactive sequences' rows
    if name == "rows_past_last":
        assert not got[7:].any()


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_unwritten_slots_never_reach_the_output(target):
    """NaN in the tail of a sequence's last page (slots at or past its kv_len: an unwritten cache) must not reach
    any row, its own or those of a sequence sharing its token block (a kernel-engineer attack: 0 * NaN in the value
    product made all of sequence 1's rows NaN)."""
    q, kv, lens, table, cu, ns = _inputs([1, 3], [9, 8], slots=2, pages=4, hq=16, hkv=2, seed=4)
    page_of = int(table[0, 1])  # sequence 0's second page holds its slot 8; slots 9.. are past kv_len 9
    kv = kv.at[page_of, 1:].set(jnp.nan)
    args = (q, kv, lens, table, cu, ns)
    want = np.asarray(rpa.reference(*args, scale=0.1), np.float32)
    assert np.isfinite(want).all()
    with get_target(target).execution():
        got = np.asarray(jax.jit(lambda *a: rpa.ragged_paged_attention(
            *a, target=target, scale=0.1, config=rpa.Config(block_q=8, pages_per_block=2)))(*args), np.float32)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=2e-4)


def test_kv_len_past_the_table_with_a_partial_last_page_block():
    """kv_len 44 over a table of 5 pages of 8 (40 slots) with 3 pages per TPU step: the step past the last page
    repeats it as padding, and those copies must not be attended (a kernel-engineer attack: off by 0.09)."""
    args = _inputs([1], [44], slots=1, pages=5, hq=2, hkv=1, seed=5)
    want = np.asarray(rpa.reference(*args, scale=0.1), np.float32)
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(lambda *a: rpa.ragged_paged_attention(
            *a, target="tpu", scale=0.1, config=rpa.Config(block_q=8, pages_per_block=3)))(*args), np.float32)
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lowers(target):
    args = _inputs([1, 1, 16, 14], [17, 65, 31, 47], slots=6, hq=16, hkv=2, page=16, pages=8, dtype=jnp.bfloat16)
    fn = lambda *a: rpa.ragged_paged_attention(*a, target=target, scale=0.1)  # noqa: E731
    get_target(target).lower(fn, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in args])


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_pages_past_the_length_are_not_read(target):
    q, kv, lens, table, cu, ns = _inputs([1, 3], [9, 12], slots=2, pages=4, seed=1)  # pages used: 2 and 2
    fn = jax.jit(lambda *a: rpa.ragged_paged_attention(*a, target=target, scale=0.1,
                                                       config=rpa.Config(block_q=2, pages_per_block=1)))
    with get_target(target).execution():
        clean = np.asarray(fn(q, kv, lens, table, cu, ns))
        unused = np.asarray(table)[[0, 0, 1, 1], [2, 3, 2, 3]]
        poisoned = np.asarray(fn(q, kv.at[unused].set(jnp.nan), lens, table, cu, ns))
    np.testing.assert_array_equal(poisoned, clean)


def test_reference_matches_the_task():
    path = Path(__file__).resolve().parents[2] / "data/jaxbench/7p_Ragged_Paged_Attention.py"
    spec = importlib.util.spec_from_file_location("task7p", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for scale, seed in (("ci", 0), ("heldout", 4)):
        xs, (head_dim, max_tokens) = mod.make_inputs(scale, seed)
        want = np.asarray(mod.ragged_paged_attention(*xs, head_dim, max_tokens), np.float32)
        got = np.asarray(rpa.reference(*[jnp.asarray(x) for x in xs], scale=head_dim ** -0.5), np.float32)
        np.testing.assert_allclose(got, want, atol=1e-2, rtol=1e-2)


def test_config_validates():
    with pytest.raises(ValueError):
        rpa.Config(block_q=0)
    with pytest.raises(ValueError):
        rpa.Config(pages_per_block=0)
    shapes = rpa.Shapes(4096, 64, 8, 128, 16, 256)
    for chip in ("v5e", "v6e"):
        cfg = rpa.default(chip, shapes)
        assert rpa.config.tpu_vmem(shapes, cfg.block_q, cfg.pages_per_block) <= rpa.config.validate.vmem_budget(
            rpa.config.get_spec(chip))
    assert rpa.space("tpu", shapes)["block_q"] and rpa.space("gpu", shapes)["num_warps"]
