"""Held-out everyday JAX functions for measuring mk's offline kernel author: the SECOND held-out set.

Written on 2026-12-07 by a helper that had not read the author's or the kernels' code (nothing under
mk/author/, mk/kernels/, programs/, retrievers/ or evals/results/, nor their git history). It read only the
README, mk/api.py (for the ``mk.optimize`` signature and shapes format), mk/task.py, examples/*.py, and
tests/user_functions/heldout.py for its file format (the :class:`UserFunction` dataclass and its helpers, which
are imported from there). The functions are different model blocks, or clearly different variants, from the
ones in heldout.py.

This second set was written after the first set's results were known to the main developer, but not to its
writer, who saw no measurement of the author on anything. It must never be tuned on: changing a function here,
or the author, after looking at how it did on these invalidates the set.

Each entry is a :class:`UserFunction` whose ``shapes``, ``static`` and ``static_argnames`` go to
``mk.optimize(fn, shapes, static=static, static_argnames=static_argnames, ...)`` as they are: ``shapes`` has
one item per array argument, in order, skipping static arguments; an item is ``(shape_tuple, dtype_str)`` or a
pytree (dict) of those for a param-dict argument. The functions are written the way model code is written
(Flax / Equinox / PyTorch-port style parameter dicts, bf16 and f32, static eps / num_heads / scale / causal
flags), with modest sizes (each array at most 2 MiB) and several awkward, non-128-multiple sizes (77, 100,
192, 197, 200, 300, 1000, head_dim 40, 60 experts ...). About a third are attention, a third matmul / MLP,
a third elementwise, normalisation, reduction or scan.

Integer and boolean inputs: ``UserFunction`` carries no ``inits``, so ``mk.optimize`` draws them itself.
heldout.py's docstring reports integers in [0, 256) and booleans in [0, 2); building this set's tasks with
``mk.loaders.callable.callable_task`` on 2026-12-07 showed ``randint`` [0, 4) for both int32 inputs here
(labels (4, 64), tokens (4, 128)) and [0, 2) for the bool mask (observed, not read from mk's code). Every entry
is valid for ANY draw in [0, 256): integer labels and token ids index axes of at least 1000, and the boolean
mask is applied with a finite fill value so an all-False row stays finite. :func:`make_inputs` draws integers
from the wider [0, 256).

``check_all()`` runs every function once (jitted, statics applied) on random inputs and asserts that the
outputs are finite, that every input is at most 2 MiB and that ``jax.eval_shape`` works at the declared shapes.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from tests.user_functions.heldout import BF16, F32, UserFunction, _is_leaf

__all__ = ["FUNCTIONS", "UserFunction", "check_all", "make_inputs"]


# --------------------------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------------------------
def single_head_attention(q, k, v):
    """Plain single-head scaled dot-product attention on rank-3 (batch, seq, dim) arrays, non-causal."""
    d = q.shape[-1]
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / jnp.sqrt(jnp.float32(d))
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.matmul(weights, v)


def vit_attention(q, k, v):
    """ViT encoder self-attention core: (B, H, S, D) bf16, 197 tokens (CLS + 14x14 patches), f32 softmax."""
    scale = q.shape[-1] ** -0.5
    attn = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    attn = jax.nn.softmax(attn, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", attn.astype(v.dtype), v)


def dpa_causal(q, k, v, scale=0.125, is_causal=True):
    """Modern Flax code: jax.nn.dot_product_attention in (B, S, N, H) layout with a static scale and causal flag."""
    return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=is_causal)


def gqa_grouped_einsum(q, k, v, causal=True):
    """GQA without repeat_kv: 12 query heads in 4 groups of 3 over 4 kv heads, (B, S, H, D) bf16, 192 tokens."""
    b, s, hq, d = q.shape
    hkv = k.shape[2]
    g = hq // hkv
    qg = q.reshape(b, s, hkv, g, d)
    logits = jnp.einsum("bqkgd,btkd->bkgqt", qg, k, preferred_element_type=jnp.float32) / math.sqrt(d)
    if causal:
        mask = jnp.tril(jnp.ones((s, s), dtype=jnp.bool_))
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgqt,btkd->bqkgd", probs, v)
    return out.reshape(b, s, hq, d)


def sd_cross_attention(params, x, context, num_heads=8):
    """Stable-Diffusion CrossAttention: image tokens attend to 77 text tokens; to_q/to_k/to_v without bias,
    to_out with bias; heads split inside (head_dim 40); f32."""
    b, n, inner = x.shape[0], x.shape[1], params["to_q"].shape[1]
    m = context.shape[1]
    hd = inner // num_heads
    q = (x @ params["to_q"]).reshape(b, n, num_heads, hd).transpose(0, 2, 1, 3)
    k = (context @ params["to_k"]).reshape(b, m, num_heads, hd).transpose(0, 2, 1, 3)
    v = (context @ params["to_v"]).reshape(b, m, num_heads, hd).transpose(0, 2, 1, 3)
    sim = jnp.einsum("bhid,bhjd->bhij", q, k) * (hd ** -0.5)
    attn = jax.nn.softmax(sim, axis=-1)
    out = jnp.einsum("bhij,bhjd->bhid", attn, v)
    out = out.transpose(0, 2, 1, 3).reshape(b, n, inner)
    return out @ params["to_out"]["kernel"] + params["to_out"]["bias"]


def attention_additive_mask(q, k, v, mask):
    """(B, H, S, D) f32 attention with one additive (S, S) float mask shared by every batch and head
    (a precomputed ALiBi / prefix-LM style bias)."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores + mask
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def bert_self_attention(query_layer, key_layer, value_layer, attention_mask, num_heads=12):
    """HF BERT self-attention core in bf16: transpose_for_scores on (B, S, hidden) projections, HF's
    extended additive mask (B, 1, 1, S) in f32, context merged back to (B, S, hidden)."""
    b, s, hidden = query_layer.shape
    hd = hidden // num_heads

    def transpose_for_scores(t):
        return t.reshape(b, s, num_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = map(transpose_for_scores, (query_layer, key_layer, value_layer))
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / math.sqrt(hd)
    scores = scores.astype(jnp.float32) + attention_mask
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    context = jnp.matmul(probs, v)
    return context.transpose(0, 2, 1, 3).reshape(b, s, hidden)


def mqa_decode_attention(q, k_cache, v_cache):
    """One decoding step of multi-query attention (PaLM / Falcon): 16 query heads (B, H, D) against a single
    shared kv head's cache (B, L, D) of 1000 positions; bf16 with f32 softmax."""
    d = q.shape[-1]
    logits = jnp.einsum("bhd,bld->bhl", q, k_cache, preferred_element_type=jnp.float32) * (d ** -0.5)
    weights = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhl,bld->bhd", weights.astype(v_cache.dtype), v_cache)


# --------------------------------------------------------------------------------------------------------------
# MLPs and linear layers
# --------------------------------------------------------------------------------------------------------------
def rmsnorm_dense(params, x, eps=1e-6):
    """Qwen2-sized (hidden 896) RMSNorm then a bias-free Dense, bf16 with f32 statistics; (B, S, D) input."""
    h = x.astype(jnp.float32)
    h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps)
    h = (h * params["norm"]["scale"].astype(jnp.float32)).astype(x.dtype)
    return jnp.einsum("bsd,df->bsf", h, params["proj"]["kernel"])


def relu_mlp(params, x):
    """Flax tutorial MLP classifier (MNIST): Dense_0 -> ReLU -> Dense_1 to 10 logits, f32."""
    h = x @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"]
    h = jax.nn.relu(h)
    return h @ params["Dense_1"]["kernel"] + params["Dense_1"]["bias"]


def squared_relu_mlp(params, x):
    """Primer / Nemotron feed-forward: down(relu(up(x))**2), bf16, no biases."""
    h = x @ params["up"]
    h = jnp.square(jax.nn.relu(h))
    return h @ params["down"]


def fused_gate_up_mlp(params, x):
    """Phi-3 MLP ported from PyTorch: one gate_up_proj with (out, in) weight, chunk in two, SiLU gate, down_proj
    with (out, in) weight; bf16."""
    gate_up = x @ params["gate_up_proj"].T
    gate, up = jnp.split(gate_up, 2, axis=-1)
    return (up * jax.nn.silu(gate)) @ params["down_proj"].T


def linear_bias_cast(x, w, b):
    """Mixed-precision Dense: f32 master params and input cast to bf16 for the matmul, f32 accumulation and
    bias add, bf16 result (Flax param_dtype=f32, dtype=bf16)."""
    y = jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return (y + b).astype(jnp.bfloat16)


def lora_linear(params, x, alpha=16.0):
    """LoRA-adapted linear layer: frozen W plus (alpha / r) * x A B, rank r = 8 read from A's shape; bf16."""
    r = params["lora_a"].shape[-1]
    base = x @ params["kernel"]
    delta = (x @ params["lora_a"]) @ params["lora_b"]
    return base + (alpha / r) * delta


def moe_router_topk(params, x, k=4):
    """Qwen-MoE style router: f32 logits over 60 experts, softmax, top-k, renormalised weights; returns
    (weights (T, k) f32, expert ids (T, k) int32)."""
    logits = x.astype(jnp.float32) @ params["router"]
    probs = jax.nn.softmax(logits, axis=-1)
    weights, experts = jax.lax.top_k(probs, k)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return weights, experts


def clip_similarity_logits(image_embeds, text_embeds, logit_scale):
    """CLIP contrastive logits: L2-normalise both embeddings, cosine similarity matrix scaled by exp(logit_scale)
    (a learned 0-d parameter); 256 images x 300 texts."""
    image_embeds = image_embeds / jnp.linalg.norm(image_embeds, axis=-1, keepdims=True)
    text_embeds = text_embeds / jnp.linalg.norm(text_embeds, axis=-1, keepdims=True)
    return jnp.exp(logit_scale) * image_embeds @ text_embeds.T


# --------------------------------------------------------------------------------------------------------------
# normalisation, elementwise, reductions, scans
# --------------------------------------------------------------------------------------------------------------
def layernorm_bf16(params, x, eps=1e-5):
    """CLIP text-encoder LayerNorm (no dense after it): bf16 in and out, f32 statistics, scale and bias."""
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.var(xf, axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps)
    y = y * params["scale"].astype(jnp.float32) + params["bias"].astype(jnp.float32)
    return y.astype(x.dtype)


def group_norm_silu(params, x, num_groups=32, eps=1e-5):
    """UNet ResNet-block entry: GroupNorm over channel groups of an NHWC map (Flax layout), affine, then SiLU."""
    b, h, w, c = x.shape
    xg = x.reshape(b, h, w, num_groups, c // num_groups)
    mean = jnp.mean(xg, axis=(1, 2, 4), keepdims=True)
    var = jnp.mean(jnp.square(xg - mean), axis=(1, 2, 4), keepdims=True)
    xg = (xg - mean) * jax.lax.rsqrt(var + eps)
    y = xg.reshape(b, h, w, c) * params["scale"] + params["bias"]
    return jax.nn.silu(y)


def masked_softmax_over_seq(scores, mask):
    """Attention pooling weights: per-head scores (B, S, H), softmax over the SEQUENCE axis (axis 1), padded
    positions (mask False) excluded with a large finite negative."""
    scores = jnp.where(mask[:, :, None], scores, -1e9)
    return jax.nn.softmax(scores, axis=1)


def cross_entropy_smooth_zloss(logits, labels, label_smoothing=0.1, z_loss=1e-4):
    """T5X / PaLM training loss: label-smoothed cross-entropy plus z-loss (z_loss * logsumexp**2), bf16 logits
    computed in f32, mean over (batch, seq) -> a scalar."""
    logits = logits.astype(jnp.float32)
    v = logits.shape[-1]
    lse = jax.nn.logsumexp(logits, axis=-1)
    log_probs = logits - lse[..., None]
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (v - 1)
    targets = jax.nn.one_hot(labels, v) * (confidence - low) + low
    loss = -jnp.sum(targets * log_probs, axis=-1) + z_loss * jnp.square(lse)
    return jnp.mean(loss)


def ema_scan(x, decay=0.9):
    """Exponential moving average along time with jax.lax.scan (time-major inside): h_t = d h_{t-1} + (1-d) x_t,
    h_0 = 0; returns every h_t in (B, T, D)."""
    xs = jnp.swapaxes(x, 0, 1)

    def step(h, x_t):
        h = decay * h + (1.0 - decay) * x_t
        return h, h

    _, hs = jax.lax.scan(step, jnp.zeros_like(xs[0]), xs)
    return jnp.swapaxes(hs, 0, 1)


def fake_quant_per_channel(w):
    """QAT fake quantisation of a (in, out) weight: symmetric int8 per output channel (absmax / 127), round,
    clip, dequantise, with a straight-through estimator."""
    amax = jnp.max(jnp.abs(w), axis=0, keepdims=True)
    scale = jnp.maximum(amax, 1e-8) / 127.0
    q = jnp.clip(jnp.round(w / scale), -127, 127)
    return w + jax.lax.stop_gradient(q * scale - w)


def causal_depthwise_conv1d(params, x):
    """Mamba's short causal depthwise conv (kernel 4) over (B, L, D) via lax.conv_general_dilated with
    feature_group_count=D and left padding, then bias and SiLU; f32, L = 200."""
    kw = params["kernel"].shape[0]
    y = jax.lax.conv_general_dilated(
        x, params["kernel"], window_strides=(1,), padding=((kw - 1, 0),),
        dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=x.shape[-1])
    return jax.nn.silu(y + params["bias"])


def gemma_embed(params, tokens):
    """Gemma input embedding: table lookup, then multiply by sqrt(d_model) rounded to the table's dtype (bf16)."""
    x = jnp.take(params["embedding"], tokens, axis=0)
    normalizer = jnp.sqrt(jnp.float32(x.shape[-1])).astype(x.dtype)
    return x * normalizer


# --------------------------------------------------------------------------------------------------------------
# the set
# --------------------------------------------------------------------------------------------------------------
FUNCTIONS: list[UserFunction] = [
    # attention (8)
    UserFunction(
        "single_head_attention", single_head_attention,
        [((4, 200, 96), F32), ((4, 200, 96), F32), ((4, 200, 96), F32)],
        {}, (),
        "Rank-3 (B, S, D) single-head attention, non-causal, f32; awkward S=200 and D=96."),
    UserFunction(
        "vit_attention", vit_attention,
        [((2, 12, 197, 64), BF16), ((2, 12, 197, 64), BF16), ((2, 12, 197, 64), BF16)],
        {}, (),
        "(B, H, S, D) non-causal bf16, 197 tokens (not a multiple of 8), f32 scores and softmax."),
    UserFunction(
        "dpa_causal", dpa_causal,
        [((2, 256, 8, 64), BF16), ((2, 256, 8, 64), BF16), ((2, 256, 8, 64), BF16)],
        {"scale": 0.125, "is_causal": True}, ("scale", "is_causal"),
        "jax.nn.dot_product_attention, (B, S, N, H) layout, static scale 0.125 (= 64**-0.5) and static causal flag."),
    UserFunction(
        "gqa_grouped_einsum", gqa_grouped_einsum,
        [((2, 192, 12, 64), BF16), ((2, 192, 4, 64), BF16), ((2, 192, 4, 64), BF16)],
        {"causal": True}, ("causal",),
        "GQA with 3 query heads per kv head via a grouped reshape/einsum (no repeat), (B, S, H, D), causal flag "
        "static, S=192 (a multiple of 64, not of 128)."),
    UserFunction(
        "sd_cross_attention", sd_cross_attention,
        [{"to_q": ((320, 320), F32), "to_k": ((768, 320), F32), "to_v": ((768, 320), F32),
          "to_out": {"kernel": ((320, 320), F32), "bias": ((320,), F32)}},
         ((2, 256, 320), F32), ((2, 77, 768), F32)],
        {"num_heads": 8}, ("num_heads",),
        "Cross-attention with projections: 256 query tokens vs 77 context tokens, static num_heads=8 giving "
        "head_dim 40; f32 param dict."),
    UserFunction(
        "attention_additive_mask", attention_additive_mask,
        [((2, 4, 160, 64), F32), ((2, 4, 160, 64), F32), ((2, 4, 160, 64), F32), ((160, 160), F32)],
        {}, (),
        "(B, H, S, D) f32 with an additive float (S, S) mask broadcast over batch and heads; S=160."),
    UserFunction(
        "bert_self_attention", bert_self_attention,
        [((4, 128, 768), BF16), ((4, 128, 768), BF16), ((4, 128, 768), BF16), ((4, 1, 1, 128), F32)],
        {"num_heads": 12}, ("num_heads",),
        "HF BERT: heads split inside by transpose (static num_heads=12, head_dim 64), additive f32 extended mask "
        "(B, 1, 1, S) (random normal values here, any finite values are valid), bf16 q/k/v."),
    UserFunction(
        "mqa_decode_attention", mqa_decode_attention,
        [((4, 16, 128), BF16), ((4, 1000, 128), BF16), ((4, 1000, 128), BF16)],
        {}, (),
        "Single-token decode, multi-query: q (B, H, D) against one shared kv head's (B, L, D) cache, L=1000 "
        "(not a multiple of 128); bf16, f32 softmax."),
    # matmul / MLP (8)
    UserFunction(
        "rmsnorm_dense", rmsnorm_dense,
        [{"norm": {"scale": ((896,), BF16)}, "proj": {"kernel": ((896, 1024), BF16)}},
         ((2, 100, 896), BF16)],
        {"eps": 1e-6}, ("eps",),
        "RMSNorm (f32 stats, bf16 scale) feeding a bias-free Dense 896 -> 1024; D=896 = 7*128, S=100."),
    UserFunction(
        "relu_mlp", relu_mlp,
        [{"Dense_0": {"kernel": ((784, 512), F32), "bias": ((512,), F32)},
          "Dense_1": {"kernel": ((512, 10), F32), "bias": ((10,), F32)}},
         ((200, 784), F32)],
        {}, (),
        "2-layer ReLU MLP, f32, Flax auto-named params; awkward 784 inputs, 200 rows and only 10 outputs."),
    UserFunction(
        "squared_relu_mlp", squared_relu_mlp,
        [{"up": ((512, 1536), BF16), "down": ((1536, 512), BF16)}, ((4, 64, 512), BF16)],
        {}, (),
        "relu(x W_up)**2 W_down, bf16, no biases, (B, S, D) input, hidden 1536."),
    UserFunction(
        "fused_gate_up_mlp", fused_gate_up_mlp,
        [{"gate_up_proj": ((2048, 384), BF16), "down_proj": ((384, 1024), BF16)}, ((2, 96, 384), BF16)],
        {}, (),
        "Fused gate/up weight in PyTorch (out, in) layout used transposed, split in halves, SiLU-gated, "
        "down_proj transposed; bf16, D=384, hidden 1024, S=96."),
    UserFunction(
        "linear_bias_cast", linear_bias_cast,
        [((320, 640), F32), ((640, 768), F32), ((768,), F32)],
        {}, (),
        "f32 inputs cast to bf16 inside, f32 accumulation and bias, bf16 output; M=320, K=640."),
    UserFunction(
        "lora_linear", lora_linear,
        [{"kernel": ((768, 768), BF16), "lora_a": ((768, 8), BF16), "lora_b": ((8, 768), BF16)},
         ((4, 128, 768), BF16)],
        {"alpha": 16.0}, ("alpha",),
        "Frozen weight plus a rank-8 LoRA update scaled by static alpha / r; bf16 (B, S, D) input."),
    UserFunction(
        "moe_router_topk", moe_router_topk,
        [{"router": ((768, 60), F32)}, ((256, 768), BF16)],
        {"k": 4}, ("k",),
        "Router matmul to 60 experts (not a multiple of 8 lanes), softmax, lax.top_k with static k=4, "
        "renormalise; two outputs, one of them int32 indices."),
    UserFunction(
        "clip_similarity_logits", clip_similarity_logits,
        [((256, 512), F32), ((300, 512), F32), ((), F32)],
        {}, (),
        "Two L2 normalisations, a (256, 512) x (512, 300) cosine-similarity matrix, times exp of a 0-d f32 "
        "parameter (random normal is fine: CLIP initialises it to log(1/0.07) ~ 2.66)."),
    # normalisation / elementwise / reduction / scan (8)
    UserFunction(
        "layernorm_bf16", layernorm_bf16,
        [{"scale": ((768,), BF16), "bias": ((768,), BF16)}, ((8, 77, 768), BF16)],
        {"eps": 1e-5}, ("eps",),
        "LayerNorm alone, bf16 in/out with f32 statistics, (B, 77, 768) CLIP text shape (77 rows per example)."),
    UserFunction(
        "group_norm_silu", group_norm_silu,
        [{"scale": ((320,), F32), "bias": ((320,), F32)}, ((2, 16, 16, 320), F32)],
        {"num_groups": 32, "eps": 1e-5}, ("num_groups", "eps"),
        "GroupNorm (static 32 groups of 10 channels) over an NHWC map, statistics over H, W and the group's "
        "channels, affine, then SiLU; f32."),
    UserFunction(
        "masked_softmax_over_seq", masked_softmax_over_seq,
        [((16, 200, 8), F32), ((16, 200), "bool")],
        {}, (),
        "Softmax over axis 1 (not the last axis) of (B, S, H) scores with a bool (B, S) mask, True = keep; any "
        "mask is valid (an all-False row gives uniform weights). mk draws bool inputs as [0, 2)."),
    UserFunction(
        "cross_entropy_smooth_zloss", cross_entropy_smooth_zloss,
        [((4, 64, 1000), BF16), ((4, 64), "int32")],
        {"label_smoothing": 0.1, "z_loss": 1e-4}, ("label_smoothing", "z_loss"),
        "Scalar loss: label-smoothed cross-entropy plus z-loss over V=1000 classes (not a multiple of 128), "
        "bf16 logits upcast to f32. labels must lie in [0, 1000); any integer draw in [0, 256) is valid "
        "(mk's task drew [0, 4) when observed, so only the first few classes are labels)."),
    UserFunction(
        "ema_scan", ema_scan,
        [((8, 256, 96), F32)],
        {"decay": 0.9}, ("decay",),
        "Sequential lax.scan over 256 time steps of a (B, D) carry with static decay; output every state, "
        "(B, T, D) f32, D=96."),
    UserFunction(
        "fake_quant_per_channel", fake_quant_per_channel,
        [((768, 640), F32)],
        {}, (),
        "Column-wise absmax reduction, round/clip to the int8 grid, dequantise, straight-through estimator; "
        "f32 (768, 640)."),
    UserFunction(
        "causal_depthwise_conv1d", causal_depthwise_conv1d,
        [{"kernel": ((4, 1, 384), F32), "bias": ((384,), F32)}, ((2, 200, 384), F32)],
        {}, (),
        "Depthwise (feature_group_count = 384) causal conv of width 4 over (B, L, D), L=200, via "
        "lax.conv_general_dilated, then bias and SiLU; f32."),
    UserFunction(
        "gemma_embed", gemma_embed,
        [{"embedding": ((1024, 768), BF16)}, ((4, 128), "int32")],
        {}, (),
        "Gather rows of a bf16 (V=1024, D=768) table by int32 token ids, scale by sqrt(768) in bf16. Token ids "
        "must lie in [0, 1024); any integer draw in [0, 256) is valid (mk's task drew [0, 4) when observed)."),
]


# --------------------------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------------------------
def _draw(item: Any, key: jax.Array) -> Any:
    """Random inputs for one ``shapes`` item, drawn as mk draws them: N(0, 1) floats, integers in [0, 256)
    (int8 wrapping), booleans in [0, 2)."""
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
