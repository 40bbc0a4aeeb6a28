# Upstream op: jax.experimental.pallas.ops.tpu.paged_attention.paged_attention (paged GQA decode; the KV
# pages are DMA'd from HBM, so the judge also runs it in the TPU interpreter's race detector).
# Task: jaxbench:6p_Paged_Attention (one query token per sequence, length-masked, 8 query heads per KV head)
# at scale ci (4 sequences, Hq=16, Hkv=2, D=128, 8 pages of 16 slots per sequence).
# Target: tpu. Expected verdict: correct.
# Glue: the query row of each sequence (queries[cu_q_lens[i]]), pre-scaled by D^-0.5 (the op has no scale);
# the pages transposed to the op's (Hkv, pages, page_size, D) layout. 4 pages per compute block.
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import paged_attention as upstream


def kernel(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens,
           num_seqs, num_q_heads, num_kv_heads, head_dim, max_seq_len):
    q = queries[cu_q_lens[:num_seqs]] * jnp.asarray(head_dim**-0.5, queries.dtype)
    k = jnp.transpose(k_pages, (2, 0, 1, 3))
    v = jnp.transpose(v_pages, (2, 0, 1, 3))
    return upstream.paged_attention(q, k, v, kv_lens, page_indices, pages_per_compute_block=4)
