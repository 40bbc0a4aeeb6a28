# The JAXBench optimized.py mistake on 6p: paged-attention decode without the softmax scale head_dim**-0.5.
# Outputs are about 1e-3 and the task's atol is 1e-2, so the task's tolerance alone accepts it (and zeros).
# Task: jaxbench:6p_Paged_Attention at scale ci, target cpu (pure JAX).
# Expected verdict: incorrect at ci seed 0: the tolerance is tightened to the output's own scale where it cannot
# reject the reference scaled by 0.9 (mk.harness.compare.rejecting_tolerance).
import jax
import jax.numpy as jnp


def kernel(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
           num_seqs, num_q_heads, num_kv_heads, head_dim, max_seq_len):
    rep = num_q_heads // num_kv_heads
    q = queries[cu_q_lens[:num_seqs]].astype(jnp.float32)  # (N, Hq, D)
    k = k_pages[page_indices].reshape(num_seqs, max_seq_len, num_kv_heads, head_dim).astype(jnp.float32)
    v = v_pages[page_indices].reshape(num_seqs, max_seq_len, num_kv_heads, head_dim).astype(jnp.float32)
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("nhd,nthd->nht", q, k)   # the softmax scale head_dim**-0.5 omitted
    s = jnp.where(jnp.arange(max_seq_len)[None, None, :] < kv_lens[:, None, None], s, -1e30)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("nht,nthd->nhd", p, v).astype(queries.dtype)
