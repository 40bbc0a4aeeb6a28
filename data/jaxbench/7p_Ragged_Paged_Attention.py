"""7p_Ragged_Paged_Attention.

Ragged paged attention over a mixed batch of decode tokens and prefill chunks (combined K/V pages).
Source: Llama-3.1-70B ragged paged attention (JaxBench production task). mk's own implementation,
written from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Ragged paged attention over a batch that mixes 48 decode sequences and 8 prefill chunks. Hq=64, "
    "Hkv=8, D=128, page_size=16, pages_per_seq=256 (4096 kv slots per seq), max_tokens=4096, max_seqs=64."
    " Layout: kv_pages (16384 pages, 16 slots, 16 combined heads, 128). Combined head 2*g is K of KV head"
    " g and combined head 2*g+1 is V of KV head g (K = [:,:,0::2], V = [:,:,1::2]). A Python loop is "
    "unrolled over a MODULE-LEVEL constant ACTIVE_Q_LENS = (1,)*48 + (512,)*7 + (464,) (56 sequences). "
    "For sequence i with static capacity C_i: q_start = cu_q_lens[i], q_len = cu_q_lens[i+1] - q_start, "
    "kv_len = kv_lens[i]. Query token positions pos = min(q_start + arange(C_i), 4095) are gathered. All "
    "256 pages page_indices[i] are gathered, giving 4096 kv tokens (token t = local_page*16 + slot). KV "
    "heads are repeated x8, so q head h uses KV head floor(h/8). s = einsum('qhd,khd->hqk') with "
    "preferred_element_type=float32, then s *= 1/sqrt(128) in f32. Mask, with r the query offset and t "
    "the kv index: masked iff (kv_len - q_len + r < t) or (t >= kv_len). This is causal attention where "
    "the query block occupies the last q_len positions of the kv sequence. Masked scores are set to "
    "-0.7*float32_max (about -2.38e38). p = softmax(s) over t in f32, then cast to bf16. o = "
    "einsum('hqk,khd->qhd', p, v), bf16. Rows with r >= q_len, or with i >= num_seqs[0], are zeroed. The "
    "result is scatter-ADDED into a bf16 zeros (4096,64,128) buffer at pos. Resulting data: cu_q_lens = "
    "[0,1,...,48, 560, 1072, ..., 3632, 4096, 4096...] padded to 65 entries with 4096. kv_lens[i] = 257 +"
    " ((i*73) % 240)*16 for i<48 (range 257..4081), then 1023, 1535, 2047, 2559, 3071, 3583, 4095, 4095, "
    "then zeros up to 64 entries. num_seqs = [56]. So every one of the 4096 token rows is written exactly"
    " once; decode queries attend to kv[0:kv_len] and prefill queries attend causally with offset kv_len "
    "- q_len. Quirks: (a) the loop bounds come from module constants, not from the inputs, so the "
    "function is only correct for this exact ragged layout. (b) Every sequence computes over all 4096 kv "
    "slots regardless of kv_len: the reference does about 562 GFLOP while only about 333 GFLOP is "
    "unmasked. (c) head_dim is used in math.sqrt, so it must be static; head_dim is also re-read from "
    "kv_pages.shape. (d) page_indices is a random permutation of 0..16383, so pages are scattered non-"
    "contiguously. mk note: ACTIVE_Q_LENS is a module constant keyed by max_tokens: 4096 is the published"
    " layout; 48 is the ci layout (2 decode tokens, two 16-token prefill chunks and a last chunk of 14; "
    "kv_lens 17,65 then 31,47,127, then 1 empty slot; num_seqs=[5]; 16 query / 2 KV heads; 8 pages of 16 "
    "slots per sequence; random page permutation). Other max_tokens keys may exist for sizes that are "
    "judged but not shown. mk note: with the default ('native') inputs every array, floats included, "
    "comes from the task's generator `make_inputs(scale, seed)` (numpy, not the published jax.random "
    "values). Seed 0 draws the published distributions and layout above (numpy seed 42). Every other seed"
    " draws the floats afresh and randomises the structure within the task's constraints: page_indices is"
    " another random permutation of all pages, and each active sequence's kv_len is uniform in [q_len, "
    "pages_per_seq*page_size] (decode sequences: [1, pages_per_seq*page_size]); inactive slots keep "
    "kv_len 0. The query lengths (cu_q_lens) and num_seqs stay those of ACTIVE_Q_LENS: the reference's "
    "loop is unrolled for that ragged layout and its capacities sum to max_tokens, so every token row is "
    "written exactly once. So a kernel must read page_indices and kv_lens. Other input distributions "
    "redraw the floats only; the structure still follows the seed."
)

GFLOP = 561.6
MIN_BYTES = 1208025608

#: The ragged layout the reference is unrolled for, keyed by max_tokens (a module constant,
#: as in the original; the small layout serves the ci scale with the same structure).
ACTIVE_Q_LENS = {
    4096: (1,) * 48 + (512,) * 7 + (464,),
    48: (1,) * 2 + (16,) * 2 + (14,),
    64: (1,) * 3 + (24,) + (21,) + (16,),
}


def ragged_paged_attention(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, head_dim, max_tokens):
    """queries (T,Hq,D) bf16; kv_pages (P,page,2*Hkv,D) bf16 with K at even and V at odd
    combined heads; kv_lens (S,), page_indices (S,pages), cu_q_lens (S+1,), num_seqs (1,) int32."""
    num_q_heads = queries.shape[1]
    d = kv_pages.shape[-1]  # re-read from the pages, as the original does; the static head_dim sets the scale
    num_kv_heads = kv_pages.shape[2] // 2
    n_rep = num_q_heads // num_kv_heads
    kv_slots = page_indices.shape[1] * kv_pages.shape[1]
    scale = 1.0 / math.sqrt(head_dim)
    neg = -0.7 * float(jnp.finfo(jnp.float32).max)
    out = jnp.zeros((max_tokens, num_q_heads, d), jnp.bfloat16)
    t = jnp.arange(kv_slots)[None, None, :]
    for i, cap in enumerate(ACTIVE_Q_LENS[max_tokens]):
        q_start = cu_q_lens[i]
        q_len = cu_q_lens[i + 1] - q_start
        kv_len = kv_lens[i]
        pos = jnp.minimum(q_start + jnp.arange(cap), max_tokens - 1)
        q = queries[pos]
        kv = kv_pages[page_indices[i]].reshape(kv_slots, 2 * num_kv_heads, d)
        k = jnp.repeat(kv[:, 0::2], n_rep, axis=1)
        v = jnp.repeat(kv[:, 1::2], n_rep, axis=1)
        s = jnp.einsum("qhd,khd->hqk", q, k, preferred_element_type=jnp.float32) * scale
        r = jnp.arange(cap)[None, :, None]
        masked = (kv_len - q_len + r < t) | (t >= kv_len)
        s = jnp.where(masked, neg, s)
        p = jax.nn.softmax(s, axis=-1).astype(jnp.bfloat16)
        o = jnp.einsum("hqk,khd->qhd", p, v)
        keep = (jnp.arange(cap) < q_len) & (i < num_seqs[0])
        o = jnp.where(keep[:, None, None], o, jnp.zeros_like(o))
        out = out.at[pos].add(o)
    return out


_LAYOUT = {  # scale -> max_tokens, max_seqs, Hq, Hkv, D, page_size, pages_per_seq, kv_lens of the active seqs
    "full": (4096, 64, 64, 8, 128, 16, 256,
             [257 + ((i * 73) % 240) * 16 for i in range(48)] + [1023, 1535, 2047, 2559, 3071, 3583, 4095, 4095]),
    "ci": (48, 6, 16, 2, 128, 16, 8, [17 + ((i * 73) % 7) * 16 for i in range(2)] + [31, 47, 127]),
    # judged, never shown to an author: another ragged layout (3 decode tokens, chunks of 24, 21 and 16),
    # 8 query / 2 KV heads, 6 pages per sequence and 2 empty slots
    "heldout": (64, 8, 8, 2, 128, 16, 6, [5, 40, 96, 33, 95, 16]),
}


def _dims(scale):
    tokens, seqs, hq, hkv, d, page, pps, _ = _LAYOUT[scale]
    return {"T": tokens, "Hq": hq, "D": d, "P": seqs * pps, "PAGE": page, "C": 2 * hkv,
            "NS": seqs, "PPS": pps, "NS1": seqs + 1}


def make_inputs(scale, seed=0):
    """N(0,1) queries and pages and the ragged layout of ACTIVE_Q_LENS. Seed 0: the published layout
    (numpy seed 42). Other seeds: another random page permutation and random kv_lens, each in
    [q_len, pages_per_seq*page_size] (numpy, seeded from ``seed``)."""
    tokens, seqs, hq, hkv, d, page, pps, lens = _LAYOUT[scale]
    active = ACTIVE_Q_LENS[tokens]
    rng = np.random.default_rng(42 if seed == 0 else [42, seed])
    bf16 = np.dtype(jnp.bfloat16)
    queries = rng.standard_normal((tokens, hq, d), np.float32).astype(bf16)
    kv_pages = rng.standard_normal((seqs * pps, page, 2 * hkv, d), np.float32).astype(bf16)
    page_indices = rng.permutation(seqs * pps).astype(np.int32).reshape(seqs, pps)
    if seed != 0:  # causal with the queries last: a sequence's kv_len covers its q_len tokens
        lens = [int(rng.integers(q, pps * page + 1)) for q in active]
    kv_lens = np.zeros(seqs, np.int32)
    kv_lens[: len(lens)] = lens
    cu = np.concatenate([[0], np.cumsum(active)]).astype(np.int32)
    cu_q_lens = np.concatenate([cu, np.full(seqs + 1 - len(cu), cu[-1], np.int32)])
    num_seqs = np.array([len(active)], np.int32)
    return [queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs], [d, tokens]


TASK = Task(
    name="7p_Ragged_Paged_Attention",
    reference=ragged_paged_attention,
    args=(
        ArgSpec("queries", ("T", "Hq", "D"), "bfloat16", Init("normal")),
        ArgSpec("kv_pages", ("P", "PAGE", "C", "D"), "bfloat16", Init("normal")),
        ArgSpec("kv_lens", ("NS",), "int32", Init("native")),
        ArgSpec("page_indices", ("NS", "PPS"), "int32", Init("native")),
        ArgSpec("cu_q_lens", ("NS1",), "int32", Init("native")),
        ArgSpec("num_seqs", (1,), "int32", Init("native")),
    ),
    static=(StaticArg("head_dim", 128), StaticArg("max_tokens", 4096)),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims=_dims("full")),
        "ci": Scale("ci", dims=_dims("ci"), static={"head_dim": 128, "max_tokens": 48}),
    },
    heldout=(Scale("heldout", dims=_dims("heldout"), static={"head_dim": 128, "max_tokens": 64}),),
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
    native_inputs=make_inputs,
)
