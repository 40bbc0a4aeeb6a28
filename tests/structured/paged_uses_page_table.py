# Control: the same paged-attention decode, gathering each sequence's pages through the page table.
# Task: jaxbench:6p_Paged_Attention at scale ci, target cpu (pure JAX).
# Expected verdict: correct (every case, every seed, the held-out scale included).
import jax
import jax.numpy as jnp


def kernel(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
           num_seqs, num_q_heads, num_kv_heads, head_dim, max_seq_len):
    rep = num_q_heads // num_kv_heads
    q = queries[cu_q_lens[:num_seqs]].astype(jnp.float32)  # (N, Hq, D)
    k = k_pages[page_indices].reshape(num_seqs, max_seq_len, num_kv_heads, head_dim).astype(jnp.float32)
    v = v_pages[page_indices].reshape(num_seqs, max_seq_len, num_kv_heads, head_dim).astype(jnp.float32)
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("nhd,nthd->nht", q, k) * head_dim**-0.5
    s = jnp.where(jnp.arange(max_seq_len)[None, None, :] < kv_lens[:, None, None], s, -1e30)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("nht,nthd->nhd", p, v).astype(queries.dtype)
