"""The built-in production tasks recomputed from their prose facts with numpy in float64, rounding to bfloat16
(through float32, as XLA does) wherever the facts say a value is bf16; written independently of the task modules,
so a shared mistake would need to be made twice. Used by tests/test_suite_production.py and
tests/test_structured_inputs.py."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def bf(x):
    """Round to bf16 (via float32) and hold the value in float64."""
    return np.asarray(np.asarray(x, np.float64).astype(np.float32).astype(BF16), np.float64)


def f64(x):
    """Floating inputs as float64 (bf16 values are exact there); integer inputs unchanged."""
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer):
        return x
    return np.asarray(x.astype(np.float32) if x.dtype == BF16 else x, np.float64)


def softmax_bf16(s):
    """jax.nn.softmax on bf16 as the facts spell it: max, exp(s - m), f32 sum rounded to bf16, divide."""
    m = s.max(axis=-1, keepdims=True)
    e = bf(np.exp(bf(s - m)))
    den = bf(e.sum(axis=-1, keepdims=True))
    return bf(e / den)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu_bf16(g):
    return bf(g * bf(sigmoid(g)))


def causal(s_len):
    return np.tril(np.ones((s_len, s_len), bool))


# --- the facts, one function per task -------------------------------------


def np_flash(q, k, v):
    d = q.shape[-1]
    s = bf(bf(np.einsum("bhqd,bhkd->bhqk", q, k)) * bf(d**-0.5))
    s = np.where(causal(q.shape[2]), s, bf(-1e9))
    return bf(np.einsum("bhqk,bhkd->bhqd", softmax_bf16(s), v))


def np_gqa(q, k, v):
    g = q.shape[2] // k.shape[2]
    heads = np.arange(q.shape[2]) // g  # query head h uses KV head h // g
    k, v = k[:, :, heads], v[:, :, heads]
    s = bf(bf(np.einsum("bqhd,bkhd->bhqk", q, k)) * bf(q.shape[-1] ** -0.5))
    s = np.where(causal(q.shape[1]), s, bf(-1e9))
    return bf(np.einsum("bhqk,bkhd->bqhd", softmax_bf16(s), v))


def np_mla(x, wqd, wqu, wkvd, wku, wvu, wo, h, nope, rope, vdim, kvl, theta):
    b, s_len, _ = x.shape
    q = bf(bf(x @ wqd) @ wqu).reshape(b, s_len, h, nope + rope)
    kv = bf(x @ wkvd)
    k_nope = bf(kv[..., :kvl] @ wku).reshape(b, s_len, h, nope)
    v = bf(kv[..., :kvl] @ wvu).reshape(b, s_len, h, vdim)
    k_rope = np.repeat(kv[..., None, kvl:], h, axis=2)
    inv_freq = (1.0 / np.float32(theta) ** (np.arange(0, rope, 2, dtype=np.float32) / np.float32(rope))).astype(np.float32)
    ang = np.arange(s_len, dtype=np.float32)[:, None] * inv_freq[None, :]
    cos, sin = bf(np.cos(ang.astype(np.float64)))[None, :, None], bf(np.sin(ang.astype(np.float64)))[None, :, None]

    def rot(u):
        u1, u2 = u[..., : rope // 2], u[..., rope // 2 :]
        return np.concatenate([bf(bf(u1 * cos) - bf(u2 * sin)), bf(bf(u2 * cos) + bf(u1 * sin))], axis=-1)

    qf = np.concatenate([q[..., :nope], rot(q[..., nope:])], axis=-1)
    kf = np.concatenate([k_nope, rot(k_rope)], axis=-1)
    s = bf(bf(np.einsum("bqhd,bkhd->bhqk", qf, kf)) * bf((nope + rope) ** -0.5))
    s = np.where(causal(s_len), s, bf(-1e9))
    o = bf(np.einsum("bhqk,bkhd->bqhd", softmax_bf16(s), v)).reshape(b, s_len, h * vdim)
    return bf(o @ wo)


def np_sparse(q, k, v, S, H_q, H_kv, D):
    heads = np.arange(H_q) // (H_q // H_kv)
    s = bf(np.einsum("bhqd,bhkd->bhqk", q, k[:, heads]))
    s = np.where(causal(S), s, bf(-1e30))
    return bf(np.einsum("bhqk,bhkd->bhqd", softmax_bf16(s), v[:, heads]))


def np_flex(q, k, v, bias, head_dim, seq_len):
    s = bf(bf(np.einsum("bhqd,bhkd->bhqk", q, k)) * bf(head_dim**-0.5))
    s = bf(s + bias[None])
    s = np.where(causal(seq_len), s, bf(-1e30))
    return bf(np.einsum("bhqk,bhkd->bhqd", softmax_bf16(s), v))


def np_paged(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, hq, hkv, d, max_len):
    heads = np.arange(hq) // (hq // hkv)
    out = np.zeros((num_seqs, hq, d))
    for i in range(num_seqs):
        q = queries[int(cu_q_lens[i])]  # (hq, d)
        kk = k_pages[page_indices[i]].reshape(max_len, hkv, d)[:, heads]  # (t, hq, d)
        vv = v_pages[page_indices[i]].reshape(max_len, hkv, d)[:, heads]
        s = bf(bf(np.einsum("hd,thd->ht", q, kk)) * bf(d**-0.5))
        s = np.where(np.arange(max_len)[None] < kv_lens[i], s, bf(-1e30))
        out[i] = bf(np.einsum("ht,thd->hd", softmax_bf16(s), vv))
    return out


def np_ragged_paged(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, head_dim, max_tokens):
    """From the inputs alone: sequence i < num_seqs owns query rows cu[i]..cu[i+1]-1, which sit at
    the last q_len positions of its kv_len-long history; rows owned by no sequence stay zero."""
    hq, hkv2 = queries.shape[1], kv_pages.shape[2]
    heads = np.arange(hq) // (hq // (hkv2 // 2))
    out = np.zeros(queries.shape)
    for i in range(int(num_seqs[0])):
        q0, q1, kv_len = int(cu_q_lens[i]), int(cu_q_lens[i + 1]), int(kv_lens[i])
        kv = kv_pages[page_indices[i]].reshape(-1, hkv2, kv_pages.shape[-1])[:kv_len]
        kk, vv = kv[:, 0::2][:, heads], kv[:, 1::2][:, heads]
        for r in range(q1 - q0):
            visible = kv_len - (q1 - q0) + r + 1  # causal: t <= kv_len - q_len + r
            s = np.einsum("hd,thd->ht", queries[q0 + r], kk[:visible]) / math.sqrt(head_dim)
            p = np.exp(s - s.max(-1, keepdims=True))
            p = bf(p / p.sum(-1, keepdims=True))
            out[q0 + r] = bf(np.einsum("ht,thd->hd", p, vv[:visible]))
    return out


def np_gemm(a, b):
    return bf(a @ b)


def np_swiglu(x, wg, wu, wd):
    h = bf(silu_bf16(bf(x @ wg)) * bf(x @ wu))
    return bf(h @ wd)


def np_moe(x, wr, wg, wu, wd, top_k):
    logits = bf(x @ wr)
    idx = np.argsort(-logits, axis=-1, kind="stable")[..., :top_k]  # ties: lower index first
    probs = softmax_bf16(np.take_along_axis(logits, idx, axis=-1))
    out = np.zeros(x.shape)
    for n in range(wr.shape[1]):
        h = bf(silu_bf16(bf(x @ wg[n])) * bf(x @ wu[n]))
        y = bf(h @ wd[n])
        w = (probs * (idx == n)).sum(-1)  # f32 weight: the prob if n was chosen, else 0
        out += y * w[..., None]
    return out


def np_gmm(lhs, rhs, group_sizes, max_expert_size):
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for g, size in enumerate(np.asarray(group_sizes)):
        assert size <= max_expert_size  # the facts' inputs never overflow a slab
        out[start : start + size] = bf(lhs[start : start + size] @ rhs[g])
        start += int(size)
    return out


def np_rmsnorm(x, scale, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    n = x / np.sqrt(ms + np.float32(eps))
    return bf(bf(n) * scale)


def np_cross_entropy(hidden, weight, labels):
    logits = bf(hidden @ weight)
    sh = bf(logits - logits.max(-1, keepdims=True))
    lse = bf(np.log(bf(bf(np.exp(sh)).sum(-1, keepdims=True))))
    lp = bf(sh - lse)
    return -np.mean(lp[np.arange(len(labels)), labels])


def np_ragged_dot(x, w):
    return bf(np.einsum("gmk,gkn->gmn", x, w))


def np_retention(q, k, v):
    h, s_len = q.shape[1], q.shape[2]
    gamma = 1.0 - 2.0 ** (-5.0 - np.arange(h))
    i, j = np.arange(s_len)[:, None], np.arange(s_len)[None, :]
    decay = np.where(i >= j, gamma[:, None, None] ** np.maximum(i - j, 0), 0.0)
    r = np.einsum("bhsd,bhtd->bhst", q, k) * decay
    r = r / np.maximum(np.abs(r).sum(-1, keepdims=True), 1.0)
    return bf(np.einsum("bhst,bhtd->bhsd", bf(r), v))


def np_mamba2(q, k, v, a_log):
    c = np.cumsum(np.log(sigmoid(a_log) + 1e-8), axis=-1)
    s_len = q.shape[2]
    tri = causal(s_len)
    L = np.where(tri, np.exp(np.where(tri, c[..., :, None] - c[..., None, :], 0.0)), 0.0)
    sc = np.einsum("bhsd,bhtd->bhst", q, k) * L
    den = sc.sum(-1, keepdims=True)
    den = np.where(np.abs(den) < 1e-6, 1.0, den)
    sc = sc / np.maximum(np.abs(den), 1.0)
    return bf(np.einsum("bhst,bhtd->bhsd", bf(sc), v))


def np_triangle(pair, mask, wlp, wrp, wlg, wrg, cscale, wo, wog):
    act = bf(pair * mask)
    left = bf(bf(act @ wlp) * bf(sigmoid(bf(act @ wlg))))
    right = bf(bf(act @ wrp) * bf(sigmoid(bf(act @ wrg))))
    t = bf(np.einsum("ikc,jkc->ijc", left, right))
    ms = bf(np.mean(bf(t * t), axis=-1, keepdims=True))
    rms = bf(np.sqrt(bf(ms + bf(1e-6))))
    t = bf(bf(t / rms) * cscale)
    o = bf(t @ wo)
    return bf(o * bf(sigmoid(bf(pair @ wog))))


FACTS = {
    "1p_Flash_Attention": np_flash,
    "2p_GQA_Attention": np_gqa,
    "3p_MLA_Attention": np_mla,
    "4p_Sparse_Attention": np_sparse,
    "5p_Flex_Attention": np_flex,
    "6p_Paged_Attention": np_paged,
    "7p_Ragged_Paged_Attention": np_ragged_paged,
    "8p_GEMM": np_gemm,
    "9p_SwiGLU_MLP": np_swiglu,
    "10p_Sparse_MoE": np_moe,
    "11p_Megablox_GMM": np_gmm,
    "12p_RMSNorm": np_rmsnorm,
    "13p_Cross_Entropy": np_cross_entropy,
    "14p_Ragged_Dot": np_ragged_dot,
    "15p_RetNet_Retention": np_retention,
    "16p_Mamba2_SSD": np_mamba2,
    "17p_Triangle_Multiplication": np_triangle,
}
