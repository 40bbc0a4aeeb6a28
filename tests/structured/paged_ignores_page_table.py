# Structured inputs: a paged-attention decode that ignores the page table (it assumes the identity table,
# sequence i owning pages i*pages_per_seq .. (i+1)*pages_per_seq - 1, the published layout). It reads the
# query rows and kv_lens as it should.
# Task: jaxbench:6p_Paged_Attention at scale ci, target cpu (pure JAX).
# Expected verdict: incorrect, on a case with a non-zero seed (seed 0 has the identity table; every other
# seed draws a random page permutation).
import jax
import jax.numpy as jnp


def kernel(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
           num_seqs, num_q_heads, num_kv_heads, head_dim, max_seq_len):
    del page_indices  # the trick: the page table is never read
    rep = num_q_heads // num_kv_heads
    q = queries[cu_q_lens[:num_seqs]].astype(jnp.float32)  # (N, Hq, D)
    k = k_pages.reshape(num_seqs, max_seq_len, num_kv_heads, head_dim).astype(jnp.float32)
    v = v_pages.reshape(num_seqs, max_seq_len, num_kv_heads, head_dim).astype(jnp.float32)
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("nhd,nthd->nht", q, k) * head_dim**-0.5
    s = jnp.where(jnp.arange(max_seq_len)[None, None, :] < kv_lens[:, None, None], s, -1e30)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("nht,nthd->nhd", p, v).astype(queries.dtype)
