"""Held-out everyday JAX functions for measuring mk's offline kernel author: the THIRD held-out set.

Written on 2026-12-08 by a helper that had not read the author's or the kernels' code (nothing under
mk/author/, mk/kernels/, programs/, retrievers/ or evals/ (evals/results/ included), nor their git history; a
``git status`` in the checkout listed the NAMES of some uncommitted files under mk/author/ and mk/kernels/, whose
contents were not opened). It read only the README, mk/api.py (for the ``mk.optimize`` signature and shapes
format), mk/task.py (its dtype and input-drawing parts), examples/attention.py, and tests/user_functions/heldout.py
and tests/user_functions/heldout2.py, for their file format (the :class:`UserFunction` dataclass and helpers,
imported from heldout.py) and so that the functions here are different model blocks, or clearly different
variants, from the ones in those two sets. No other test file was read.

The writer saw no measurement of the author on anything, on this set or the earlier two. It must never be tuned
on: changing a function here, or the author, after looking at how it did on these invalidates the set.

Each entry is a :class:`UserFunction` whose ``shapes``, ``static`` and ``static_argnames`` go to
``mk.optimize(fn, shapes, static=static, static_argnames=static_argnames, ...)`` as they are: ``shapes`` has
one item per array argument, in order, skipping static arguments; an item is ``(shape_tuple, dtype_str)`` or a
pytree (dict) of those for a param-dict argument. The functions are written the way model code is written in
Flax, Equinox, PyTorch ports and plain JAX (HF Conv1D / nn.Linear (out, in) weights, Flax (in, out) kernels,
Equinox ``jax.vmap`` over a Linear, sequence-first ``nn.MultiheadAttention`` layout, channels-first NCHW and
(B, C, T) layouts, bf16 and f32, static eps / num_heads / rotary_dim / temperature), with modest sizes (each
array at most 2 MiB) and awkward sizes (49, 77, 100, 150, 196, 197, 300, 1376, 3000, head_dim 32 / 48 / 80,
100 router slots ...). 8 are attention, 8 matmul / MLP blocks, 8 normalisation, softmax / loss reductions,
rotary embedding, scan, pooling, gated elementwise and router.

Integer and boolean inputs: ``UserFunction`` carries no ``inits``, so ``mk.optimize`` draws them itself (the
earlier sets report draws in [0, 256) or [0, 4) for integers and [0, 2) for booleans; not re-observed here).
Every entry is valid for ANY integer draw in [0, 256): labels index a 3000-class axis, position and segment ids
are used arithmetically / by equality only, the int8 weight is valid for any int8 value, and every boolean mask is
applied with a finite fill so a fully masked row stays finite. :func:`make_inputs` draws integers from [0, 256)
(int8 wrapping to [-128, 127]) and booleans from [0, 2).

``check_all()`` runs every function once (jitted, statics applied) on random inputs and asserts that the
outputs are finite, that every input is at most 2 MiB and that ``jax.eval_shape`` works at the declared shapes.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tests.user_functions.heldout import BF16, F32, UserFunction, _is_leaf

__all__ = ["FUNCTIONS", "UserFunction", "check_all", "make_inputs"]


# --------------------------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------------------------
def gpt2_fused_qkv_attention(params, x, num_heads=8):
    """HF GPT-2 attention ported to JAX: one c_attn Conv1D ((in, out) weight, bias) to 3*D, split q/k/v, heads
    split inside (head_dim 48), causal with GPT-2's masked_bias -1e4, merge heads, c_proj Conv1D; f32."""
    b, s, d = x.shape
    hd = d // num_heads
    qkv = x @ params["c_attn"]["weight"] + params["c_attn"]["bias"]
    q, k, v = jnp.split(qkv, 3, axis=2)

    def split_heads(t):
        return t.reshape(b, s, num_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    w = jnp.matmul(q, k.transpose(0, 1, 3, 2)) / (float(hd) ** 0.5)
    causal = jnp.tril(jnp.ones((s, s), dtype=jnp.bool_))[None, None]
    w = jnp.where(causal, w, jnp.float32(-1e4))
    w = jax.nn.softmax(w, axis=-1)
    a = jnp.matmul(w, v)
    a = a.transpose(0, 2, 1, 3).reshape(b, s, d)
    return a @ params["c_proj"]["weight"] + params["c_proj"]["bias"]


def _t5_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5X's bucketing (numpy, at trace time: positions are static)."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).astype(np.int32) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        np.log(n.astype(np.float32) / max_exact + np.finfo(np.float32).eps)
        / np.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(np.int32)
    val_if_large = np.minimum(val_if_large, num_buckets - 1)
    ret += np.where(is_small, n, val_if_large)
    return ret


def t5_relative_attention(q, k, v, rel_embedding, bidirectional=True, num_buckets=32, max_distance=128):
    """T5 encoder self-attention core: the relative-position bias is computed INSIDE from a learned
    (num_buckets, H) table indexed by T5's log-spaced buckets; T5 applies no 1/sqrt(d) scaling; (B, H, S, D) f32."""
    qlen, klen = q.shape[2], k.shape[2]
    context_position = np.arange(qlen, dtype=np.int32)[:, None]
    memory_position = np.arange(klen, dtype=np.int32)[None, :]
    buckets = _t5_relative_position_bucket(memory_position - context_position, bidirectional, num_buckets,
                                           max_distance)
    values = jnp.take(rel_embedding, jnp.asarray(buckets), axis=0)  # (q, k, H)
    position_bias = jnp.transpose(values, (2, 0, 1))[None]  # (1, H, q, k)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) + position_bias
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(scores.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v)


def _bloom_alibi_slopes(num_heads):
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = 2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3)))
    slopes = [base ** p for p in range(1, 1 + closest_power_of_2)]
    if closest_power_of_2 != num_heads:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3)))
        num_remaining = min(closest_power_of_2, num_heads - closest_power_of_2)
        slopes += [extra_base ** p for p in range(1, 1 + 2 * num_remaining, 2)]
    return np.asarray(slopes, dtype=np.float32)


def bloom_alibi_attention(q, k, v):
    """BLOOM attention core: ALiBi built inside the BLOOM way (slopes for a non-power-of-two head count, bias =
    slope * key position, added before the scaled q k^T as baddbmm does), causal with finfo.min, f32 softmax cast
    to bf16; (B, S, H, D) bf16 with 12 heads of 80."""
    _, s, h, d = q.shape
    slopes = jnp.asarray(_bloom_alibi_slopes(h))
    alibi = slopes[:, None, None] * jnp.arange(s, dtype=jnp.float32)[None, None, :]  # (H, 1, S)
    inv_norm_factor = 1.0 / math.sqrt(d)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * inv_norm_factor
    scores = scores + alibi[None]
    causal = jnp.tril(jnp.ones((s, s), dtype=jnp.bool_))
    scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def swin_window_attention(params, x, num_heads=3, window_size=7):
    """Swin-T WindowAttention (stage 1) ported from PyTorch: windows already partitioned to (num_windows*B, 49,
    C=96); qkv Linear with bias, q scaled, relative-position bias gathered from a (169, H) table by a static index,
    softmax, proj Linear; no shift mask; f32, head_dim 32. Kernels here are (in, out)."""
    b_, n, c = x.shape
    hd = c // num_heads
    qkv = (x @ params["qkv"]["kernel"] + params["qkv"]["bias"]).reshape(b_, n, 3, num_heads, hd)
    qkv = qkv.transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = q * (hd ** -0.5)
    attn = q @ jnp.swapaxes(k, -2, -1)

    coords = np.stack(np.meshgrid(np.arange(window_size), np.arange(window_size), indexing="ij"))
    coords_flatten = coords.reshape(2, -1)
    rel = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).transpose(1, 2, 0)
    rel[:, :, 0] += window_size - 1
    rel[:, :, 1] += window_size - 1
    rel[:, :, 0] *= 2 * window_size - 1
    relative_position_index = rel.sum(-1)  # (N, N)
    bias = params["relative_position_bias_table"][relative_position_index.reshape(-1)]
    bias = bias.reshape(n, n, num_heads).transpose(2, 0, 1)
    attn = attn + bias[None]
    attn = jax.nn.softmax(attn, axis=-1)
    out = (attn @ v).transpose(0, 2, 1, 3).reshape(b_, n, c)
    return out @ params["proj"]["kernel"] + params["proj"]["bias"]


def torch_mha_cross_attention(params, query, memory, key_padding_mask, num_heads=8):
    """torch.nn.MultiheadAttention forward ported to JAX, SEQUENCE-FIRST layout (T, B, E) / (S, B, E): packed
    in_proj_weight (3E, E) and bias, q scaled before the bmm over (B*H) batches, key_padding_mask (B, S) with
    PyTorch's convention True = PAD (ignored), filled with a finite -1e9 instead of -inf, out_proj (E, E); f32."""
    tgt_len, bsz, e = query.shape
    src_len = memory.shape[0]
    hd = e // num_heads
    w_q, w_k, w_v = jnp.split(params["in_proj_weight"], 3, axis=0)
    b_q, b_k, b_v = jnp.split(params["in_proj_bias"], 3)
    q = query @ w_q.T + b_q
    k = memory @ w_k.T + b_k
    v = memory @ w_v.T + b_v
    q = q.reshape(tgt_len, bsz * num_heads, hd).transpose(1, 0, 2)
    k = k.reshape(src_len, bsz * num_heads, hd).transpose(1, 0, 2)
    v = v.reshape(src_len, bsz * num_heads, hd).transpose(1, 0, 2)
    q = q * (float(hd) ** -0.5)
    attn = jnp.matmul(q, k.transpose(0, 2, 1)).reshape(bsz, num_heads, tgt_len, src_len)
    attn = jnp.where(key_padding_mask[:, None, None, :], -1e9, attn)
    attn = jax.nn.softmax(attn, axis=-1).reshape(bsz * num_heads, tgt_len, src_len)
    out = jnp.matmul(attn, v)
    out = out.transpose(1, 0, 2).reshape(tgt_len, bsz, e)
    return out @ params["out_proj"]["weight"].T + params["out_proj"]["bias"]


def guided_diffusion_qkv_attention(qkv, num_heads=4):
    """OpenAI guided-diffusion QKVAttention on a CHANNELS-FIRST (B, 3*H*C, T) bf16 tensor (T = 14*14 = 196
    pixels, C = 80): q and k each pre-scaled by 1/sqrt(sqrt(C)) in bf16, softmax in f32 cast back to bf16."""
    bs, width, length = qkv.shape
    ch = width // (3 * num_heads)
    q, k, v = jnp.split(qkv, 3, axis=1)
    scale = 1 / math.sqrt(math.sqrt(ch))
    weight = jnp.einsum("bct,bcs->bts", (q * scale).reshape(bs * num_heads, ch, length),
                        (k * scale).reshape(bs * num_heads, ch, length))
    weight = jax.nn.softmax(weight.astype(jnp.float32), axis=-1).astype(weight.dtype)
    a = jnp.einsum("bts,bcs->bct", weight, v.reshape(bs * num_heads, ch, length))
    return a.reshape(bs, -1, length)


def qk_norm_causal_attention(params, q, k, v, eps=1e-6):
    """Qwen3 / OLMo-2 style attention core: per-head RMSNorm of q and k over head_dim (f32 statistics, learned
    (D,) weights) applied in (B, S, H, D), then transposed to (B, H, S, D), additive causal mask of finfo.min,
    f32 softmax; bf16, head_dim 128."""
    def rms(t, w):
        tf = t.astype(jnp.float32)
        tf = tf * jax.lax.rsqrt(jnp.mean(tf * tf, axis=-1, keepdims=True) + eps)
        return (w * tf.astype(t.dtype)).astype(t.dtype)

    q = rms(q, params["q_norm"]["weight"]).transpose(0, 2, 1, 3)
    k = rms(k, params["k_norm"]["weight"]).transpose(0, 2, 1, 3)
    v = v.transpose(0, 2, 1, 3)
    s, d = q.shape[2], q.shape[3]
    mask = jnp.triu(jnp.full((s, s), jnp.finfo(jnp.float32).min, dtype=jnp.float32), k=1)
    scores = jnp.matmul(q, jnp.swapaxes(k, 2, 3)).astype(jnp.float32) * (d ** -0.5) + mask
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.matmul(probs, v).transpose(0, 2, 1, 3)


def segment_packed_attention(q, k, v, segment_ids):
    """MaxText-style attention over PACKED sequences: a query sees a key only if both carry the same segment id
    and the key is not in the future; masked with -0.7 * finfo(f32).max; (B, H, S, D) bf16, f32 logits. Any
    int32 segment ids are valid (the diagonal is always visible)."""
    s = q.shape[2]
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(
        jnp.float32(q.shape[-1]))
    same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]
    causal = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
    mask = (same_segment & causal[None])[:, None]
    logits = jnp.where(mask, logits, -0.7 * float(np.finfo(np.float32).max))
    weights = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", weights.astype(v.dtype), v)


# --------------------------------------------------------------------------------------------------------------
# MLPs and linear layers
# --------------------------------------------------------------------------------------------------------------
def _gelu_new(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * jnp.power(x, 3.0))))


def gpt2_conv1d_mlp(params, x):
    """HF GPT-2 MLP ported literally: Conv1D flattens to 2-D (x.view(-1, nx)) and does addmm with an (in, out)
    weight; gelu_new written out (tanh approximation); c_proj Conv1D; reshaped back; f32."""
    lead = x.shape[:-1]
    h = jnp.dot(x.reshape(-1, x.shape[-1]), params["c_fc"]["weight"]) + params["c_fc"]["bias"]
    h = _gelu_new(h)
    h = jnp.dot(h, params["c_proj"]["weight"]) + params["c_proj"]["bias"]
    return h.reshape(*lead, -1)


def t5_gated_gelu_ffn(params, x):
    """T5 v1.1 / Flan-T5 DenseGatedActDense (Flax, (in, out) kernels): gelu_new(x wi_0) * (x wi_1), then wo; no
    biases; bf16."""
    hidden_gelu = _gelu_new(x @ params["wi_0"]["kernel"])
    hidden_linear = x @ params["wi_1"]["kernel"]
    h = hidden_gelu * hidden_linear
    return h.astype(params["wo"]["kernel"].dtype) @ params["wo"]["kernel"]


def llama_mlp_torch_layout(params, x):
    """LLaMA MLP from a PyTorch checkpoint: gate_proj / up_proj / down_proj nn.Linear weights kept (out, in) and
    used as x @ W.T; intermediate 1376 (not a multiple of 128); bf16."""
    gate = x @ params["gate_proj"]["weight"].T
    up = x @ params["up_proj"]["weight"].T
    return (jax.nn.silu(gate) * up) @ params["down_proj"]["weight"].T


def vit_prenorm_residual_mlp(params, x, eps=1e-6):
    """Second half of a ViT encoder block (Flax): x + MlpBlock(LayerNorm(x)), exact (erf) GELU; f32, 197
    tokens."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps) * params["LayerNorm_0"]["scale"] + params["LayerNorm_0"]["bias"]
    y = y @ params["MlpBlock_0"]["Dense_0"]["kernel"] + params["MlpBlock_0"]["Dense_0"]["bias"]
    y = jax.nn.gelu(y, approximate=False)
    y = y @ params["MlpBlock_0"]["Dense_1"]["kernel"] + params["MlpBlock_0"]["Dense_1"]["bias"]
    return x + y


def eqx_linear_residual(params, x, residual):
    """Equinox style: an eqx.nn.Linear ((out, in) weight, W @ x + b on ONE vector) mapped over tokens with
    jax.vmap, then the residual add; f32, 300 tokens."""
    def linear(xi):
        return params["weight"] @ xi + params["bias"]

    return residual + jax.vmap(linear)(x)


def vit_gap_classifier_head(params, x, eps=1e-6):
    """big_vision / original ViT head with a representation layer: global average pool over the patch tokens
    (CLS dropped), LayerNorm (f32 statistics, f32 affine), pre_logits Dense + tanh, head Dense to 1000 classes;
    bf16 activations and kernels."""
    pooled = jnp.mean(x[:, 1:].astype(jnp.float32), axis=1)
    mean = jnp.mean(pooled, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(pooled - mean), axis=-1, keepdims=True)
    h = (pooled - mean) * jax.lax.rsqrt(var + eps) * params["norm"]["scale"] + params["norm"]["bias"]
    h = h.astype(x.dtype)
    h = jnp.tanh(h @ params["pre_logits"]["kernel"] + params["pre_logits"]["bias"])
    return h @ params["head"]["kernel"] + params["head"]["bias"]


def int8_linear_torch_layout(x, weight_int8, scale, bias):
    """torchao-style int8 weight-only Linear: int8 (out, in) weight cast to the activation dtype, F.linear,
    THEN the per-output-channel scale and the bias, all in bf16 (no f32 accumulation requested)."""
    y = jnp.matmul(x, weight_int8.astype(x.dtype).T)
    return y * scale + bias


def bottleneck_adapter(params, x):
    """Houlsby / Pfeiffer bottleneck adapter (a rank-48 adapter with a nonlinearity): x + up(relu(down(x))),
    biases, f32, D=768, 197 tokens."""
    h = x @ params["down"]["kernel"] + params["down"]["bias"]
    h = jax.nn.relu(h)
    return x + (h @ params["up"]["kernel"] + params["up"]["bias"])


# --------------------------------------------------------------------------------------------------------------
# normalisation, softmax / losses, rotary, scans, pooling, routing
# --------------------------------------------------------------------------------------------------------------
def convnext_layernorm_channels_first(params, x, eps=1e-6):
    """ConvNeXt LayerNorm(data_format="channels_first") ported literally: NCHW, statistics over the CHANNEL
    axis 1, (x - u) / sqrt(s + eps), weight[:, None, None] and bias[:, None, None]; f32, 28x28 map, 192 ch."""
    u = jnp.mean(x, axis=1, keepdims=True)
    s = jnp.mean(jnp.square(x - u), axis=1, keepdims=True)
    x = (x - u) / jnp.sqrt(s + eps)
    return params["weight"][:, None, None] * x + params["bias"][:, None, None]


def distillation_kl_loss(student_logits, teacher_logits, temperature=4.0):
    """Hinton knowledge distillation: KL(softmax(t / T) || softmax(s / T)) with batchmean reduction, times T**2;
    bf16 student logits upcast to f32, f32 teacher logits, 1000 classes -> a scalar."""
    s = jax.nn.log_softmax(student_logits.astype(jnp.float32) / temperature, axis=-1)
    t = jax.nn.log_softmax(teacher_logits / temperature, axis=-1)
    kl = jnp.sum(jnp.exp(t) * (t - s), axis=-1)
    return jnp.mean(kl) * temperature ** 2


def gptj_partial_rotary(q, k, position_ids, rotary_dim=32, base=10000.0):
    """GPT-J style rotary embedding ALONE, interleaved pairs (rotate_every_two), applied to the first rotary_dim
    of head_dim 80 (partial rotary) with explicit int32 position_ids; sin/cos in f32, bf16 in and out; returns
    (q, k). Any integer positions are valid."""
    inv_freq = 1.0 / (base ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim))
    sinusoid = position_ids[..., None].astype(jnp.float32) * jnp.asarray(inv_freq)  # (B, S, rot/2)
    sin = jnp.repeat(jnp.sin(sinusoid)[:, :, None, :], 2, axis=3)
    cos = jnp.repeat(jnp.cos(sinusoid)[:, :, None, :], 2, axis=3)

    def rotate_every_two(t):
        rot = jnp.stack((-t[..., 1::2], t[..., ::2]), axis=-1)
        return rot.reshape(rot.shape[:-2] + (-1,))

    def apply(t):
        t_rot, t_pass = t[..., :rotary_dim], t[..., rotary_dim:]
        t_rot = t_rot.astype(jnp.float32)
        t_rot = t_rot * cos + rotate_every_two(t_rot) * sin
        return jnp.concatenate([t_rot.astype(t.dtype), t_pass], axis=-1)

    return apply(q), apply(k)


def mingru_parallel_scan(gate, candidate):
    """minGRU in parallel mode with jax.lax.associative_scan along time (axis 1): z = sigmoid(gate),
    h_t = (1 - z_t) h_{t-1} + z_t * candidate_t, h_0 = 0; every h_t returned, (B, T, D) f32, T = 300."""
    z = jax.nn.sigmoid(gate)
    a = 1.0 - z
    b = z * candidate

    def combine(left, right):
        a1, b1 = left
        a2, b2 = right
        return a2 * a1, a2 * b1 + b2

    _, h = jax.lax.associative_scan(combine, (a, b), axis=1)
    return h


def resnet_stem_max_pool(x):
    """Flax ResNet stem pooling: nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1))) written as
    flax does it, lax.reduce_window with a -inf init; NHWC f32, 56x56 -> 28x28."""
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                 ((0, 0), (1, 1), (1, 1), (0, 0)))


def masked_token_nll(logits, labels, loss_mask):
    """LM loss with a loss mask (prompt / padding tokens excluded): log_softmax in f32 over 3000 classes,
    label log-probs by take_along_axis, sum over kept tokens / max(kept count, 1); bf16 logits -> f32 scalar."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    token_ll = jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    m = loss_mask.astype(jnp.float32)
    return -jnp.sum(token_ll * m) / jnp.maximum(jnp.sum(m), 1.0)


def mamba2_gated_rmsnorm(params, x, z, eps=1e-5, group_size=96):
    """Mamba-2 RMSNormGated (norm_before_gate=False): x * silu(z) FIRST, then RMS-normalised in GROUPS of
    group_size channels (768 = 8 groups of 96), f32 compute, times weight; bf16 in and out."""
    dtype = x.dtype
    h = x.astype(jnp.float32) * jax.nn.silu(z.astype(jnp.float32))
    lead, d = h.shape[:-1], h.shape[-1]
    hg = h.reshape(*lead, d // group_size, group_size)
    hg = hg * jax.lax.rsqrt(jnp.mean(jnp.square(hg), axis=-1, keepdims=True) + eps)
    h = hg.reshape(*lead, d) * params["weight"].astype(jnp.float32)
    return h.astype(dtype)


def soft_moe_router(params, x):
    """Soft MoE (Puigcerver et al., big_vision) top-k-free routing: L2-normalised tokens and slot embeddings phi
    (times a learned 0-d scale), f32 logits (B, M, slots); dispatch = softmax over TOKENS (axis 1), combine =
    softmax over SLOTS (axis 2); returns (slot inputs (B, slots, D) f32, combine weights). 100 slots."""
    xf = x.astype(jnp.float32)
    x_n = xf * jax.lax.rsqrt(jnp.sum(jnp.square(xf), axis=-1, keepdims=True) + 1e-6)
    phi = params["phi"]
    phi_n = phi * jax.lax.rsqrt(jnp.sum(jnp.square(phi), axis=0, keepdims=True) + 1e-6) * params["scale"]
    logits = jnp.einsum("bmd,ds->bms", x_n, phi_n)
    dispatch = jax.nn.softmax(logits, axis=1)
    combine = jax.nn.softmax(logits, axis=2)
    slots = jnp.einsum("bms,bmd->bsd", dispatch, xf)
    return slots, combine


# --------------------------------------------------------------------------------------------------------------
# the set
# --------------------------------------------------------------------------------------------------------------
FUNCTIONS: list[UserFunction] = [
    # attention (8)
    UserFunction(
        "gpt2_fused_qkv_attention", gpt2_fused_qkv_attention,
        [{"c_attn": {"weight": ((384, 1152), F32), "bias": ((1152,), F32)},
          "c_proj": {"weight": ((384, 384), F32), "bias": ((384,), F32)}},
         ((2, 100, 384), F32)],
        {"num_heads": 8}, ("num_heads",),
        "Whole GPT-2 attention sub-block: fused qkv projection with bias, static num_heads=8 giving head_dim 48, "
        "causal with a -1e4 fill, output projection; f32, S=100."),
    UserFunction(
        "t5_relative_attention", t5_relative_attention,
        [((2, 8, 150, 64), F32), ((2, 8, 150, 64), F32), ((2, 8, 150, 64), F32), ((32, 8), F32)],
        {"bidirectional": True, "num_buckets": 32, "max_distance": 128},
        ("bidirectional", "num_buckets", "max_distance"),
        "(B, H, S, D) f32, non-causal, no 1/sqrt(d) scaling, bias gathered inside from a (32 buckets, 8 heads) "
        "table by T5's static log-bucketed relative positions; S=150."),
    UserFunction(
        "bloom_alibi_attention", bloom_alibi_attention,
        [((2, 128, 12, 80), BF16), ((2, 128, 12, 80), BF16), ((2, 128, 12, 80), BF16)],
        {}, (),
        "ALiBi slopes computed inside for 12 heads (8 + 4 interleaved extra slopes), bias over key positions, "
        "causal; (B, S, H, D) bf16, head_dim 80, f32 scores and softmax."),
    UserFunction(
        "swin_window_attention", swin_window_attention,
        [{"qkv": {"kernel": ((96, 288), F32), "bias": ((288,), F32)},
          "proj": {"kernel": ((96, 96), F32), "bias": ((96,), F32)},
          "relative_position_bias_table": ((169, 3), F32)},
         ((64, 49, 96), F32)],
        {"num_heads": 3, "window_size": 7}, ("num_heads", "window_size"),
        "64 windows of 7x7 = 49 tokens, C=96, 3 heads of 32; qkv and proj Linears inside, relative-position bias "
        "gathered from a (169, 3) table by a static index; f32."),
    UserFunction(
        "torch_mha_cross_attention", torch_mha_cross_attention,
        [{"in_proj_weight": ((768, 256), F32), "in_proj_bias": ((768,), F32),
          "out_proj": {"weight": ((256, 256), F32), "bias": ((256,), F32)}},
         ((50, 4, 256), F32), ((300, 4, 256), F32), ((4, 300), "bool")],
        {"num_heads": 8}, ("num_heads",),
        "Cross-attention, sequence-first (T=50, B=4, E=256) queries vs (S=300, B, E) memory, packed (3E, E) "
        "in-projection, head_dim 32, (B*H) batched bmm; bool key_padding_mask with True = PAD (PyTorch "
        "convention), finite -1e9 fill so an all-padded row gives uniform weights; any bool draw is valid."),
    UserFunction(
        "guided_diffusion_qkv_attention", guided_diffusion_qkv_attention,
        [((2, 960, 196), BF16)],
        {"num_heads": 4}, ("num_heads",),
        "One channels-first fused qkv input (B, 3*4*80, 196): heads split by reshape over channels, q and k "
        "pre-scaled by ch**-0.25 in bf16, bf16 score matmul, f32 softmax; head_dim 80, T=196."),
    UserFunction(
        "qk_norm_causal_attention", qk_norm_causal_attention,
        [{"q_norm": {"weight": ((128,), BF16)}, "k_norm": {"weight": ((128,), BF16)}},
         ((2, 200, 4, 128), BF16), ((2, 200, 4, 128), BF16), ((2, 200, 4, 128), BF16)],
        {"eps": 1e-6}, ("eps",),
        "Per-head RMSNorm of q and k (static eps) before causal attention with an additive finfo.min triangle; "
        "(B, S, H, D) in and out, (B, H, S, D) inside; bf16, S=200."),
    UserFunction(
        "segment_packed_attention", segment_packed_attention,
        [((2, 6, 256, 64), BF16), ((2, 6, 256, 64), BF16), ((2, 6, 256, 64), BF16), ((2, 256), "int32")],
        {}, (),
        "Packed-sequence causal attention: mask = same segment id AND causal, -0.7*finfo.max fill; (B, H, S, D) "
        "bf16, f32 logits. segment_ids are only compared, so any int32 draw is valid (with draws in [0, 256) most "
        "off-diagonal pairs are masked; the diagonal never is)."),
    # matmul / MLP (8)
    UserFunction(
        "gpt2_conv1d_mlp", gpt2_conv1d_mlp,
        [{"c_fc": {"weight": ((320, 1280), F32), "bias": ((1280,), F32)},
          "c_proj": {"weight": ((1280, 320), F32), "bias": ((320,), F32)}},
         ((2, 77, 320), F32)],
        {}, (),
        "GPT-2 MLP flattened to 2-D rows (154 = 2*77) for addmm-style matmuls with bias, gelu_new written out "
        "with x**3 and tanh; f32, D=320, hidden 1280."),
    UserFunction(
        "t5_gated_gelu_ffn", t5_gated_gelu_ffn,
        [{"wi_0": {"kernel": ((512, 1024), BF16)}, "wi_1": {"kernel": ((512, 1024), BF16)},
          "wo": {"kernel": ((1024, 512), BF16)}},
         ((4, 77, 512), BF16)],
        {}, (),
        "Two separate bias-free up-projections, tanh-GELU on one times the other, bias-free down projection; "
        "bf16, 77 tokens."),
    UserFunction(
        "llama_mlp_torch_layout", llama_mlp_torch_layout,
        [{"gate_proj": {"weight": ((1376, 512), BF16)}, "up_proj": {"weight": ((1376, 512), BF16)},
          "down_proj": {"weight": ((512, 1376), BF16)}},
         ((2, 100, 512), BF16)],
        {}, (),
        "SwiGLU with three separate (out, in) weights used transposed; intermediate 1376 = 10.75*128; bf16, S=100."),
    UserFunction(
        "vit_prenorm_residual_mlp", vit_prenorm_residual_mlp,
        [{"LayerNorm_0": {"scale": ((256,), F32), "bias": ((256,), F32)},
          "MlpBlock_0": {"Dense_0": {"kernel": ((256, 1024), F32), "bias": ((1024,), F32)},
                         "Dense_1": {"kernel": ((1024, 256), F32), "bias": ((256,), F32)}}},
         ((4, 197, 256), F32)],
        {"eps": 1e-6}, ("eps",),
        "Pre-LayerNorm residual MLP with Flax auto-named nested params, erf GELU; f32, 197 tokens, D=256."),
    UserFunction(
        "eqx_linear_residual", eqx_linear_residual,
        [{"weight": ((384, 512), F32), "bias": ((384,), F32)}, ((300, 512), F32), ((300, 384), F32)],
        {}, (),
        "jax.vmap of a per-vector (out, in) matvec plus bias over 300 tokens, then residual add; f32."),
    UserFunction(
        "vit_gap_classifier_head", vit_gap_classifier_head,
        [{"norm": {"scale": ((384,), F32), "bias": ((384,), F32)},
          "pre_logits": {"kernel": ((384, 768), BF16), "bias": ((768,), BF16)},
          "head": {"kernel": ((768, 1000), BF16), "bias": ((1000,), BF16)}},
         ((8, 197, 384), BF16)],
        {"eps": 1e-6}, ("eps",),
        "Two-layer classifier head after a mean over tokens 1..196 and a LayerNorm: Dense 384->768 + tanh, "
        "Dense 768->1000 (not a multiple of 128); bf16, 8 rows."),
    UserFunction(
        "int8_linear_torch_layout", int8_linear_torch_layout,
        [((2, 100, 768), BF16), ((1024, 768), "int8"), ((1024,), BF16), ((1024,), BF16)],
        {}, (),
        "bf16 activations x an int8 (out, in) weight cast to bf16, per-output-channel bf16 scale applied AFTER "
        "the matmul, bf16 bias. Any int8 values are valid (a draw in [0, 256) cast to int8 wraps to "
        "[-128, 127])."),
    UserFunction(
        "bottleneck_adapter", bottleneck_adapter,
        [{"down": {"kernel": ((768, 48), F32), "bias": ((48,), F32)},
          "up": {"kernel": ((48, 768), F32), "bias": ((768,), F32)}},
         ((2, 197, 768), F32)],
        {}, (),
        "Down-project to a 48-wide bottleneck with bias, ReLU, up-project with bias, residual add; f32."),
    # normalisation / softmax / losses / rotary / scan / pooling / routing (8)
    UserFunction(
        "convnext_layernorm_channels_first", convnext_layernorm_channels_first,
        [{"weight": ((192,), F32), "bias": ((192,), F32)}, ((2, 192, 28, 28), F32)],
        {"eps": 1e-6}, ("eps",),
        "LayerNorm over axis 1 of an NCHW map (not the last axis), 192 channels normalised per pixel, affine "
        "broadcast as (C, 1, 1); f32, 28x28 = 784 pixels."),
    UserFunction(
        "distillation_kl_loss", distillation_kl_loss,
        [((256, 1000), BF16), ((256, 1000), F32)],
        {"temperature": 4.0}, ("temperature",),
        "Two log_softmaxes at a static temperature, row KL, batch mean, times T**2 -> a scalar; mixed bf16/f32 "
        "inputs, 1000 classes."),
    UserFunction(
        "gptj_partial_rotary", gptj_partial_rotary,
        [((2, 128, 16, 80), BF16), ((2, 128, 16, 80), BF16), ((2, 128), "int32")],
        {"rotary_dim": 32}, ("rotary_dim",),
        "Interleaved (even/odd pair) rotary on the first 32 of 80 head dims, the other 48 passed through; sin/cos "
        "from int32 position ids in f32; two bf16 outputs. Any integer position ids are valid."),
    UserFunction(
        "mingru_parallel_scan", mingru_parallel_scan,
        [((4, 300, 256), F32), ((4, 300, 256), F32)],
        {}, (),
        "Linear recurrence h_t = a_t h_{t-1} + b_t via jax.lax.associative_scan over T=300 (axis 1) with "
        "sigmoid gates; f32, every state returned."),
    UserFunction(
        "resnet_stem_max_pool", resnet_stem_max_pool,
        [((2, 56, 56, 64), F32)],
        {}, (),
        "3x3 max pool, stride 2, explicit padding 1 with a -inf init, NHWC f32 (2, 56, 56, 64) -> (2, 28, 28, 64); "
        "every window holds at least one real pixel."),
    UserFunction(
        "masked_token_nll", masked_token_nll,
        [((2, 128, 3000), BF16), ((2, 128), "int32"), ((2, 128), "bool")],
        {}, (),
        "Masked mean token NLL over V=3000 (not a multiple of 128), bf16 logits upcast; a scalar. labels must lie "
        "in [0, 3000): any draw in [0, 256) is valid; any bool loss_mask is valid (all-False gives 0)."),
    UserFunction(
        "mamba2_gated_rmsnorm", mamba2_gated_rmsnorm,
        [{"weight": ((768,), BF16)}, ((2, 200, 768), BF16), ((2, 200, 768), BF16)],
        {"eps": 1e-5, "group_size": 96}, ("eps", "group_size"),
        "Gate x by silu(z), then grouped RMSNorm (static group_size 96: 8 groups per row), f32 compute, bf16 "
        "weight and output; S=200."),
    UserFunction(
        "soft_moe_router", soft_moe_router,
        [{"phi": ((384, 100), F32), "scale": ((), F32)}, ((4, 197, 384), BF16)],
        {}, (),
        "Soft-MoE routing: two L2 normalisations (tokens over D, phi over D per slot), a (197, 384) x (384, 100) "
        "logits matmul per example, softmax over tokens AND softmax over slots, then slots = dispatch^T x; two "
        "f32 outputs. scale is a 0-d learned parameter (any finite value is fine)."),
]


# --------------------------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------------------------
def _draw(item: Any, key: jax.Array) -> Any:
    """Random inputs for one ``shapes`` item: N(0, 1) floats, integers in [0, 256) (int8 wrapping), booleans in
    [0, 2)."""
    if _is_leaf(item):
        shape, dtype = item
        if dtype == "bool":
            return jax.random.randint(key, shape, 0, 2).astype(jnp.bool_)
        if jnp.issubdtype(jnp.dtype(dtype), jnp.integer):
            return jax.random.randint(key, shape, 0, 256, dtype=jnp.int32).astype(dtype)
        return jax.random.normal(key, shape, dtype=jnp.float32).astype(dtype)
    if isinstance(item, dict):
        keys = jax.random.split(key, len(item))
        return {k: _draw(v, kk) for (k, v), kk in zip(sorted(item.items()), keys)}
    if isinstance(item, (list, tuple)):
        keys = jax.random.split(key, len(item))
        return type(item)(_draw(v, kk) for v, kk in zip(item, keys))
    raise TypeError(f"cannot read a shapes item {item!r}")


def _struct(item: Any) -> Any:
    if _is_leaf(item):
        return jax.ShapeDtypeStruct(item[0], jnp.dtype(item[1]))
    if isinstance(item, dict):
        return {k: _struct(v) for k, v in item.items()}
    if isinstance(item, (list, tuple)):
        return type(item)(_struct(v) for v in item)
    raise TypeError(f"cannot read a shapes item {item!r}")


def make_inputs(uf: UserFunction, seed: int = 0) -> list[Any]:
    """Random arguments for ``uf.fn`` (one per ``shapes`` item)."""
    keys = jax.random.split(jax.random.key(seed), len(uf.shapes))
    return [_draw(item, k) for item, k in zip(uf.shapes, keys)]


def check_all(verbose: bool = True) -> None:
    """Call every function (jitted, statics applied) on random inputs; assert every output is finite, every
    input at most 2 MiB and that ``jax.eval_shape`` works at the declared shapes."""
    names = [uf.name for uf in FUNCTIONS]
    assert len(names) == len(set(names)), "duplicate names"
    assert len(FUNCTIONS) == 24, len(FUNCTIONS)
    for uf in FUNCTIONS:
        assert set(uf.static) <= set(uf.static_argnames), uf.name
        jax.eval_shape(lambda *a, _uf=uf: _uf.fn(*a, **_uf.static), *[_struct(s) for s in uf.shapes])
        args = make_inputs(uf)
        fn = jax.jit(uf.fn, static_argnames=uf.static_argnames) if uf.static_argnames else jax.jit(uf.fn)
        out = fn(*args, **uf.static)
        leaves = jax.tree_util.tree_leaves(out)
        assert leaves, f"{uf.name}: no output"
        for leaf in leaves:
            assert bool(jnp.all(jnp.isfinite(leaf.astype(jnp.float32)))), f"{uf.name}: non-finite output"
        sizes = [math.prod(s) * jnp.dtype(d).itemsize
                 for s, d in jax.tree_util.tree_leaves(uf.shapes, is_leaf=_is_leaf)]
        assert max(sizes) <= 2 * 1024 * 1024, f"{uf.name}: an input over 2 MiB"
        if verbose:
            print(f"ok {uf.name}: out {[(tuple(x.shape), str(x.dtype)) for x in leaves]}")
    if verbose:
        print(f"{len(FUNCTIONS)} functions ok")
