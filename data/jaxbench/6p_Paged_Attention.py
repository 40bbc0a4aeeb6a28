"""6p_Paged_Attention.

Paged-KV GQA decode attention, one query token per sequence, length-masked.
Source: Llama-3.1-70B paged decode attention (JaxBench production task). mk's own implementation,
written from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Paged-KV GQA decode attention with one query token per sequence. num_seqs=64, Hq=64, Hkv=8, D=128, "
    "page_size=16, pages_per_seq=256, max_seq_len=4096, total_pages=16384; all float data bf16. The "
    "computation is vmapped over seq i in 0..63. (1) q = queries[cu_q_lens[i]], a single row of shape "
    "(1,64,128) taken via dynamic_slice; cu_q_lens[i+1] is read but unused. (2) K = "
    "k_pages[page_indices[i]] (256 pages) reshaped to (4096,8,128), so token t = local_page*16 + slot; V "
    "is gathered the same way. (3) KV heads are repeated x8 so q head h uses KV head floor(h/8). s[h,t] ="
    " q[h].K[t] (einsum, bf16) * bf16(128^-0.5). (4) Length mask: t < kv_lens[i] keeps s, otherwise s = "
    "bf16(-1e30). No causal mask. (5) p = jax.nn.softmax in bf16: m = row max (bf16), e = exp(s - m) "
    "(bf16), den = sum of e accumulated in float32 then rounded to bf16, p = e / den (bf16) over t. "
    "out[i,h,:] = sum_t p*V[t, floor(h/8)], bf16. Output (64,64,128) bf16. With these inputs every kv_len"
    " is 4096, the page table is the identity (seq i owns pages i*256..i*256+255 in order) and query i is"
    " row i. The task is memory bound: it reads the whole 1 GiB KV cache. The static max_seq_len is used "
    "in a reshape and the head counts in dynamic_slice sizes, so they must be static. mk note: the ci "
    "scale has 4 sequences, 16 query / 2 KV heads and 8 pages of 16 slots per sequence. mk note: with "
    "the default ('native') inputs every array, floats included, comes from the task's generator "
    "`make_inputs(scale, seed)` (numpy, not the published jax.random values). Seed 0 draws the published "
    "distributions and layout (numpy seed 42): every kv_len = max_seq_len, the identity page table, query "
    "i is row i. Every other seed draws the floats afresh and randomises the structure within the task's "
    "constraints: page_indices is a random permutation of all num_seqs*pages_per_seq pages (so sequence i's"
    " pages are scattered), each kv_len is uniform in [1, max_seq_len], and query i is still row i "
    "(cu_q_lens = 0..num_seqs). So a kernel must read page_indices and kv_lens. Other input distributions "
    "redraw the floats only; the structure still follows the seed."
)

GFLOP = 8.71
MIN_BYTES = 1075905028


def paged_attention(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
                    num_seqs, num_q_heads, num_kv_heads, head_dim, max_seq_len):
    """queries (T,Hq,D); k/v_pages (P,page,Hkv,D); kv_lens (N,); page_indices (N,pages); cu_q_lens (N+1,)."""
    n_rep = num_q_heads // num_kv_heads

    def one(i):
        q = jax.lax.dynamic_slice(queries, (cu_q_lens[i], 0, 0), (1, num_q_heads, head_dim))
        _ = cu_q_lens[i + 1]  # read, unused: one query token per sequence
        k = k_pages[page_indices[i]].reshape(max_seq_len, num_kv_heads, head_dim)
        v = v_pages[page_indices[i]].reshape(max_seq_len, num_kv_heads, head_dim)
        k = jnp.repeat(k, n_rep, axis=1)
        v = jnp.repeat(v, n_rep, axis=1)
        s = jnp.einsum("qhd,thd->hqt", q, k) * head_dim**-0.5
        t = jnp.arange(max_seq_len)[None, None, :]
        s = jnp.where(t < kv_lens[i], s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        return jnp.einsum("hqt,thd->qhd", p, v)[0]

    return jax.vmap(one)(jnp.arange(num_seqs))


_LAYOUT = {  # scale -> (num_seqs, Hq, Hkv, D, page_size, pages_per_seq)
    "full": (64, 64, 8, 128, 16, 256),
    "ci": (4, 16, 2, 128, 16, 8),
    # judged, never shown to an author: other sequence and head counts, another group size and sequence length
    "heldout": (3, 8, 2, 128, 16, 16),
}


def _dims(scale):
    n, hq, hkv, d, page, pps = _LAYOUT[scale]
    return {"N": n, "Hq": hq, "Hkv": hkv, "D": d, "PAGE": page, "PPS": pps, "P": n * pps, "N1": n + 1}


def _static(scale):
    n, hq, hkv, d, page, pps = _LAYOUT[scale]
    return {"num_seqs": n, "num_q_heads": hq, "num_kv_heads": hkv, "head_dim": d, "max_seq_len": page * pps}


def make_inputs(scale, seed=0):
    """N(0,1) queries, N(0,0.02) pages and one query row per sequence. Seed 0: the published layout (every
    kv_len = max_seq_len, the identity page table; numpy seed 42). Other seeds: a random permutation of the
    pages as the page table and kv_lens uniform in [1, max_seq_len] (numpy, seeded from ``seed``)."""
    n, hq, hkv, d, page, pps = _LAYOUT[scale]
    rng = np.random.default_rng(42 if seed == 0 else [42, seed])
    bf16 = np.dtype(jnp.bfloat16)
    queries = rng.standard_normal((n, hq, d), np.float32).astype(bf16)
    k_pages = (rng.standard_normal((n * pps, page, hkv, d), np.float32) * 0.02).astype(bf16)
    v_pages = (rng.standard_normal((n * pps, page, hkv, d), np.float32) * 0.02).astype(bf16)
    if seed == 0:
        kv_lens = np.full((n,), page * pps, np.int32)
        page_indices = np.arange(n * pps, dtype=np.int32).reshape(n, pps)
    else:
        kv_lens = rng.integers(1, page * pps + 1, size=(n,)).astype(np.int32)
        page_indices = rng.permutation(n * pps).astype(np.int32).reshape(n, pps)
    cu_q_lens = np.arange(n + 1, dtype=np.int32)
    return [queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens], list(_static(scale).values())


_PAGES = ("P", "PAGE", "Hkv", "D")

TASK = Task(
    name="6p_Paged_Attention",
    reference=paged_attention,
    args=(
        ArgSpec("queries", ("N", "Hq", "D"), "bfloat16", Init("normal")),
        ArgSpec("k_pages", _PAGES, "bfloat16", Init("normal", std=0.02)),
        ArgSpec("v_pages", _PAGES, "bfloat16", Init("normal", std=0.02)),
        ArgSpec("kv_lens", ("N",), "int32", Init("native")),
        ArgSpec("page_indices", ("N", "PPS"), "int32", Init("native")),
        ArgSpec("cu_q_lens", ("N1",), "int32", Init("native")),
    ),
    static=tuple(StaticArg(k, v) for k, v in _static("full").items()),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims=_dims("full")),
        "ci": Scale("ci", dims=_dims("ci"), static=_static("ci")),
    },
    heldout=(Scale("heldout", dims=_dims("heldout"), static=_static("heldout")),),
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
    native_inputs=make_inputs,
)
