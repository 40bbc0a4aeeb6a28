# Upstream op: jax.experimental.pallas.ops.tpu.ragged_paged_attention.ragged_paged_attention (mixed
# prefill/decode over combined K/V pages, DMA'd from HBM with double buffering). Its block sizes come from
# the library's tuned table, which asks jax.devices()[0].device_kind while tracing.
# Task: jaxbench:7p_Ragged_Paged_Attention at scale ci (48 tokens: 2 decode tokens and 3 prefill chunks,
# Hq=16, Hkv=2, D=128, 8 pages of 16 slots per sequence, random page permutation).
# Target: tpu. Expected verdict: correct (on a TPU).
# Expected here (no TPU): unverifiable_here. It compiles for the TPU; neither of JAX 0.10.2's CPU interpreters runs it:
# the HLO interpreter cannot discharge its ref stores at literal indices (TypedInt has no shape) and the TPU
# interpreter does not support its reshaped refs (ReshapeTransform).
# Glue: none; the task's layout (K at even, V at odd combined heads) is the op's layout.
import math

from jax.experimental.pallas.ops.tpu import ragged_paged_attention as upstream


def kernel(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, head_dim, max_tokens):
    return upstream.ragged_paged_attention(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                           sm_scale=1.0 / math.sqrt(head_dim))
