"""Held-out everyday JAX functions for measuring mk's offline kernel author (issue 25, item 4).

Written on 2026-12-07 by a helper that did not read the author's or the kernels' code (nothing under
mk/author/, mk/kernels/, programs/ or any recogniser), before any measurement was taken. It read only the
README, mk/api.py (for the ``mk.optimize`` signature and shapes format), examples/*.py and mk/task.py.

These functions are the held-out set for issue 25 item 4. Never tune the author on them: changing a
function here, or the author, after looking at how it did on them invalidates the set.

Each entry is a :class:`UserFunction` whose ``shapes``, ``static`` and ``static_argnames`` go to
``mk.optimize(fn, shapes, static=static, static_argnames=static_argnames, ...)`` as they are: ``shapes`` has
one item per array argument, in order, skipping static arguments; an item is ``(shape_tuple, dtype_str)`` or
a pytree (dict) of those for a param-dict argument. The functions are written the way model code is written
(Flax / Equinox style parameter dicts, bf16 and f32, static eps / num_heads / window), with modest sizes
(each array at most about 2 MB) and a few awkward, non-128-multiple sizes.

Integer and boolean inputs: ``mk.optimize`` draws them, unless given ``inits``, as "small non-negative
integers" (its docstring; the range is not stated there). Observed on 2026-12-07 by building the tasks with
``mk.loaders.callable.callable_task`` and drawing inputs (not by reading mk's code): int32 and int8 inputs get
``randint`` in [0, 256) (for int8 that wraps to the full [-128, 127]), bool inputs ``randint`` in [0, 2). Each
entry with such an input says in its note what a valid input is and what ``inits`` would pin it to.

``check_all()`` runs every function once on random inputs and asserts that the outputs are finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class UserFunction:
    name: str
    fn: Callable[..., Any]
    shapes: list
    static: dict
    static_argnames: tuple
    note: str


BF16 = "bfloat16"
F32 = "float32"


# --------------------------------------------------------------------------------------------------------------
# normalisation
# --------------------------------------------------------------------------------------------------------------
def layernorm_dense(params, x, eps=1e-5):
    """Flax-style LayerNorm followed by nn.Dense (kernel is (in, out))."""
    ln = params["ln"]
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    h = (x - mean) * jax.lax.rsqrt(var + eps)
    h = h * ln["scale"] + ln["bias"]
    dense = params["dense"]
    return h @ dense["kernel"] + dense["bias"]


def llama_rmsnorm(hidden_states, weight, eps=1e-6):
    """LLaMA RMSNorm: statistics in f32, result cast back to the input dtype, then scaled by a bf16 weight."""
    input_dtype = hidden_states.dtype
    h = hidden_states.astype(jnp.float32)
    variance = jnp.mean(h * h, axis=-1, keepdims=True)
    h = h * jax.lax.rsqrt(variance + eps)
    return weight * h.astype(input_dtype)


def add_rmsnorm(x, residual, weight, eps=1e-6):
    """Pre-norm transformer block entry: residual add, then RMSNorm; returns (normed, new residual)."""
    h = x + residual
    hf = h.astype(jnp.float32)
    normed = hf * jax.lax.rsqrt(jnp.mean(jnp.square(hf), axis=-1, keepdims=True) + eps)
    normed = (normed * (1.0 + weight.astype(jnp.float32))).astype(x.dtype)  # Gemma-style (1 + w) scale
    return normed, h


def l2_normalize(x, eps=1e-12):
    """Row-wise L2 normalisation, as in torch.nn.functional.normalize / CLIP embeddings."""
    norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
    return x / jnp.maximum(norm, eps)


def adaln_modulate(x, shift, scale, eps=1e-6):
    """DiT adaLN: LayerNorm without affine, then per-example shift/scale broadcast over tokens."""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    h = (x - mean) / jnp.sqrt(var + eps)
    return h * (1 + scale[:, None, :]) + shift[:, None, :]


# --------------------------------------------------------------------------------------------------------------
# MLPs and linear layers
# --------------------------------------------------------------------------------------------------------------
def gelu_mlp(params, x):
    """GPT-2 / ViT MLP in bf16: Dense -> GELU (tanh approximation) -> Dense."""
    h = x @ params["fc1"]["kernel"] + params["fc1"]["bias"]
    h = jax.nn.gelu(h, approximate=True)
    return h @ params["fc2"]["kernel"] + params["fc2"]["bias"]


def swiglu_mlp(params, x):
    """LLaMA feed-forward: down(silu(gate(x)) * up(x)), no biases, bf16, (batch, seq, d_model) input."""
    gate = jnp.einsum("bsd,df->bsf", x, params["w_gate"])
    up = jnp.einsum("bsd,df->bsf", x, params["w_up"])
    return jnp.einsum("bsf,fd->bsd", jax.nn.silu(gate) * up, params["w_down"])


def geglu(x, w, b):
    """GEGLU projection (diffusers / T5 v1.1 style): one matmul to 2*hidden, split, exact GELU gate."""
    h = x @ w + b
    value, gate = jnp.split(h, 2, axis=-1)
    return value * jax.nn.gelu(gate, approximate=False)


def int8_weight_only_matmul(x, w_int8, scale):
    """Weight-only int8 quantised linear layer: int8 (in, out) weight with per-output-channel f32 scales."""
    acc = jnp.dot(x.astype(jnp.float32), w_int8.astype(jnp.float32), preferred_element_type=jnp.float32)
    return (acc * scale).astype(x.dtype)


def linear_bias_residual(x, w, b, residual):
    """Attention / MLP output projection with bias followed by the residual add."""
    return residual + (jnp.dot(x, w) + b)


def batched_matmul(a, b):
    """Plain batched matmul."""
    return jnp.einsum("bij,bjk->bik", a, b)


def bert_pooler(params, hidden_states):
    """BERT pooler: first token, then an Equinox-style Linear ((out, in) weight) and tanh."""
    first = hidden_states[:, 0]
    return jnp.tanh(first @ params["weight"].T + params["bias"])


def merge_heads_out_proj(attn_out, w_o):
    """(B, H, S, Dh) attention output -> (B, S, H*Dh) -> output projection."""
    b, h, s, d = attn_out.shape
    merged = attn_out.transpose(0, 2, 1, 3).reshape(b, s, h * d)
    return merged @ w_o


# --------------------------------------------------------------------------------------------------------------
# softmax, losses, pooling
# --------------------------------------------------------------------------------------------------------------
def softmax_with_temperature(logits, temperature=0.7):
    """Sampling distribution: softmax(logits / T)."""
    return jax.nn.softmax(logits / temperature, axis=-1)


def log_softmax(logits):
    """Log-softmax written out, over an awkward (non-128-multiple) vocabulary of 1000 classes."""
    shifted = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))


def softmax_cross_entropy(logits, labels):
    """Mean cross-entropy from logits and integer labels (optax.softmax_cross_entropy_with_integer_labels + mean)."""
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    label_logits = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return jnp.mean(lse - label_logits)


def masked_mean_pool(hidden, mask):
    """Sentence embedding: mean of token states where mask is True (at least one token counted)."""
    m = mask[..., None].astype(hidden.dtype)
    total = jnp.sum(hidden * m, axis=1)
    count = jnp.maximum(jnp.sum(m, axis=1), 1.0)
    return total / count


# --------------------------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------------------------
def mha_key_padding_mask(q, k, v, mask, num_heads=8):
    """(B, S, D) projections split into heads inside; boolean key padding mask (B, S), True = keep."""
    b, s, d = q.shape
    hd = d // num_heads
    qh = q.reshape(b, s, num_heads, hd)
    kh = k.reshape(b, s, num_heads, hd)
    vh = v.reshape(b, s, num_heads, hd)
    scores = jnp.einsum("bqhd,bkhd->bhqk", qh, kh) / math.sqrt(hd)
    big_neg = jnp.finfo(scores.dtype).min
    scores = jnp.where(mask[:, None, None, :], scores, big_neg)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, vh)
    return out.reshape(b, s, d)


def attention_with_bias(q, k, v, bias):
    """(B, H, S, D) bf16 attention with an additive f32 bias broadcast over the batch (T5 relative bias)."""
    d = q.shape[-1]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * (d ** -0.5)
    scores = scores + bias
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v)


def causal_attention_bshd(q, k, v):
    """Causal attention in (batch, seq, heads, head_dim) layout, bf16, query pre-scaled."""
    s = q.shape[1]
    q = q * (q.shape[-1] ** -0.5)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    causal = jnp.tril(jnp.ones((s, s), dtype=jnp.bool_))
    logits = jnp.where(causal[None, None], logits, -1e9)
    weights = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def gqa_causal_attention(q, k, v):
    """Grouped-query attention: 8 query heads share 2 kv heads (repeat_kv), causal, (B, H, S, D)."""
    n_rep = q.shape[1] // k.shape[1]
    k = jnp.repeat(k, n_rep, axis=1)
    v = jnp.repeat(v, n_rep, axis=1)
    s = q.shape[2]
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    mask = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
    scores = jnp.where(mask, scores, -jnp.inf)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
    return jnp.matmul(probs, v)


def softcap_attention(q, k, v, softcap=50.0):
    """Gemma-2 style attention logit soft-capping (cap * tanh(logits / cap)), causal, (B, S, H, D) bf16."""
    s = q.shape[1]
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * (q.shape[-1] ** -0.5)
    logits = softcap * jnp.tanh(logits / softcap)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    logits = jnp.where(causal, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def sliding_window_attention(q, k, v, window=64):
    """Mistral-style causal sliding-window attention, (B, H, S, D) f32: key j visible to query i iff i-window < j <= i."""
    s = q.shape[2]
    i = jnp.arange(s)[:, None]
    j = jnp.arange(s)[None, :]
    allowed = (j <= i) & (j > i - window)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    scores = jnp.where(allowed, scores, -1e30)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def _rotate_half(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def rope_causal_attention(q, k, v, base=10000.0):
    """Rotary embeddings (GPT-NeoX half rotation) on q and k, then causal attention; (B, S, H, D) f32."""
    _, s, _, d = q.shape
    inv_freq = 1.0 / (base ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    t = jnp.arange(s, dtype=jnp.float32)
    freqs = jnp.outer(t, inv_freq)
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    cos = jnp.cos(emb)[None, :, None, :]
    sin = jnp.sin(emb)[None, :, None, :]
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, -1e30)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


# --------------------------------------------------------------------------------------------------------------
# the set
# --------------------------------------------------------------------------------------------------------------
_INT_NOTE = ("mk.optimize draws integer inputs as 'small non-negative integers' unless given inits (observed: randint "
             "[0, 256)); UserFunction carries no inits, so this entry cannot set the range.")

FUNCTIONS: list[UserFunction] = [
    UserFunction(
        "layernorm_dense", layernorm_dense,
        [{"ln": {"scale": ((512,), F32), "bias": ((512,), F32)},
          "dense": {"kernel": ((512, 768), F32), "bias": ((768,), F32)}},
         ((256, 512), F32)],
        {"eps": 1e-5}, ("eps",),
        "Flax nested param dict; LayerNorm (eps static) then Dense to 768, f32."),
    UserFunction(
        "llama_rmsnorm", llama_rmsnorm,
        [((4, 128, 1024), BF16), ((1024,), BF16)],
        {"eps": 1e-6}, ("eps",),
        "RMSNorm with f32 statistics, bf16 input and bf16 weight; (B, S, D) input."),
    UserFunction(
        "add_rmsnorm", add_rmsnorm,
        [((2, 256, 768), BF16), ((2, 256, 768), BF16), ((768,), F32)],
        {"eps": 1e-6}, ("eps",),
        "Residual add + Gemma-style RMSNorm ((1 + w) scale, f32 weight); returns a tuple (normed, residual). "
        "D=768 is a multiple of 128 but not of 256."),
    UserFunction(
        "l2_normalize", l2_normalize,
        [((300, 384), F32)],
        {}, (),
        "Awkward size: 300 rows (not a multiple of 8). eps left at its default (not declared static)."),
    UserFunction(
        "adaln_modulate", adaln_modulate,
        [((8, 64, 512), F32), ((8, 512), F32), ((8, 512), F32)],
        {"eps": 1e-6}, ("eps",),
        "DiT adaLN-Zero modulation: parameter-free LayerNorm then per-example shift/scale broadcast over tokens."),
    UserFunction(
        "gelu_mlp", gelu_mlp,
        [{"fc1": {"kernel": ((512, 1024), BF16), "bias": ((1024,), BF16)},
          "fc2": {"kernel": ((1024, 512), BF16), "bias": ((512,), BF16)}},
         ((256, 512), BF16)],
        {}, (),
        "Two bf16 matmuls with tanh-approximate GELU between; Flax-style params."),
    UserFunction(
        "swiglu_mlp", swiglu_mlp,
        [{"w_gate": ((512, 1024), BF16), "w_up": ((512, 1024), BF16), "w_down": ((1024, 512), BF16)},
         ((2, 128, 512), BF16)],
        {}, (),
        "LLaMA SwiGLU feed-forward written with einsums over a (B, S, D) input, no biases."),
    UserFunction(
        "geglu", geglu,
        [((256, 256), F32), ((256, 1024), F32), ((1024,), F32)],
        {}, (),
        "One projection to 2*hidden, split in halves, exact (erf) GELU gate; f32."),
    UserFunction(
        "int8_weight_only_matmul", int8_weight_only_matmul,
        [((256, 512), BF16), ((512, 1024), "int8"), ((1024,), F32)],
        {}, (),
        "bf16 activations x int8 (in, out) weight with per-output-channel f32 scales, f32 accumulation, bf16 out. "
        "Real int8 weights span [-127, 127]; " + _INT_NOTE + " Cast to int8 that wraps to [-128, 127]; any int8 "
        "values are valid here (inits={'w_int8': {'kind': 'randint', 'low': -127, 'high': 128}} states it)."),
    UserFunction(
        "linear_bias_residual", linear_bias_residual,
        [((256, 512), F32), ((512, 512), F32), ((512,), F32), ((256, 512), F32)],
        {}, (),
        "Output projection with bias, then residual add; f32."),
    UserFunction(
        "batched_matmul", batched_matmul,
        [((8, 128, 256), F32), ((8, 256, 128), F32)],
        {}, (),
        "einsum('bij,bjk->bik'), f32."),
    UserFunction(
        "bert_pooler", bert_pooler,
        [{"weight": ((256, 256), F32), "bias": ((256,), F32)}, ((16, 128, 256), F32)],
        {}, (),
        "First-token slice, Equinox-style Linear ((out, in) weight, x @ W.T + b), tanh."),
    UserFunction(
        "merge_heads_out_proj", merge_heads_out_proj,
        [((2, 8, 128, 64), BF16), ((512, 512), BF16)],
        {}, (),
        "Transpose (B, H, S, Dh) -> (B, S, H*Dh), reshape, then the output projection matmul; bf16."),
    UserFunction(
        "softmax_with_temperature", softmax_with_temperature,
        [((128, 2048), F32)],
        {"temperature": 0.7}, ("temperature",),
        "Softmax over the last axis of logits / temperature (static float)."),
    UserFunction(
        "log_softmax", log_softmax,
        [((64, 1000), F32)],
        {}, (),
        "Awkward size: 1000 classes (not a multiple of 128). Written out with a stop_gradient max."),
    UserFunction(
        "softmax_cross_entropy", softmax_cross_entropy,
        [((256, 1024), F32), ((256,), "int32")],
        {}, (),
        "Mean cross-entropy, a scalar output. labels must lie in [0, 1024): " + _INT_NOTE
        + " [0, 256) is valid but covers only a quarter of the classes; out-of-range labels would make "
          "take_along_axis fill NaN; inits={'labels': {'kind': 'randint', 'low': 0, 'high': 1024}} covers them all."),
    UserFunction(
        "masked_mean_pool", masked_mean_pool,
        [((8, 100, 96), F32), ((8, 100), "bool")],
        {}, (),
        "Awkward sizes: S=100, D=96. mask is bool (True = real token); any values are valid (an all-False row "
        "gives zeros). mk draws bool inputs as randint [0, 2) (observed, not documented)."),
    UserFunction(
        "mha_key_padding_mask", mha_key_padding_mask,
        [((4, 128, 512), F32), ((4, 128, 512), F32), ((4, 128, 512), F32), ((4, 128), "bool")],
        {"num_heads": 8}, ("num_heads",),
        "Head split inside the function (static num_heads), boolean key padding mask (B, S) True = keep, masked "
        "with finfo.min so an all-False row stays finite (uniform weights). mk draws bool inputs as randint "
        "[0, 2) (observed, not documented)."),
    UserFunction(
        "attention_with_bias", attention_with_bias,
        [((2, 8, 128, 64), BF16), ((2, 8, 128, 64), BF16), ((2, 8, 128, 64), BF16), ((1, 8, 128, 128), F32)],
        {}, (),
        "(B, H, S, D) bf16 with an additive f32 bias (1, H, S, S) broadcast over batch; f32 scores."),
    UserFunction(
        "causal_attention_bshd", causal_attention_bshd,
        [((2, 256, 8, 64), BF16), ((2, 256, 8, 64), BF16), ((2, 256, 8, 64), BF16)],
        {}, (),
        "Causal, (B, S, H, D) layout (seq before heads), query pre-scaled, -1e9 mask."),
    UserFunction(
        "gqa_causal_attention", gqa_causal_attention,
        [((2, 8, 128, 64), BF16), ((2, 2, 128, 64), BF16), ((2, 2, 128, 64), BF16)],
        {}, (),
        "GQA: 8 query heads, 2 kv heads expanded with jnp.repeat, causal with -inf, softmax in f32; bf16."),
    UserFunction(
        "softcap_attention", softcap_attention,
        [((2, 128, 4, 128), BF16), ((2, 128, 4, 128), BF16), ((2, 128, 4, 128), BF16)],
        {"softcap": 50.0}, ("softcap",),
        "Gemma-2 tanh soft-capping of the logits (static cap), causal, (B, S, H, D), head_dim 128."),
    UserFunction(
        "sliding_window_attention", sliding_window_attention,
        [((1, 4, 256, 64), F32), ((1, 4, 256, 64), F32), ((1, 4, 256, 64), F32)],
        {"window": 64}, ("window",),
        "Causal sliding window of 64 keys (static), (B, H, S, D) f32."),
    UserFunction(
        "rope_causal_attention", rope_causal_attention,
        [((2, 128, 4, 64), F32), ((2, 128, 4, 64), F32), ((2, 128, 4, 64), F32)],
        {}, (),
        "Rotary embeddings (sin/cos computed inside from positions 0..S-1, base left at its default) on q and k, "
        "then causal attention; (B, S, H, D) f32."),
]


# --------------------------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------------------------
def _is_leaf(item: Any) -> bool:
    return (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], tuple)
            and all(isinstance(d, int) for d in item[0]) and isinstance(item[1], str))


def _draw(item: Any, key: jax.Array, labels_high: int | None = None) -> Any:
    """Random inputs for one ``shapes`` item (a leaf or a pytree of leaves)."""
    if _is_leaf(item):
        shape, dtype = item
        if dtype == "bool":
            return jax.random.bernoulli(key, 0.75, shape)
        if dtype == "int8":
            return jax.random.randint(key, shape, -127, 128, dtype=jnp.int32).astype(jnp.int8)
        if jnp.issubdtype(jnp.dtype(dtype), jnp.integer):
            return jax.random.randint(key, shape, 0, labels_high or 8, dtype=jnp.dtype(dtype))
        return jax.random.normal(key, shape, dtype=jnp.float32).astype(dtype)
    if isinstance(item, dict):
        keys = jax.random.split(key, len(item))
        return {k: _draw(v, kk, labels_high) for (k, v), kk in zip(sorted(item.items()), keys)}
    if isinstance(item, (list, tuple)):
        keys = jax.random.split(key, len(item))
        return type(item)(_draw(v, kk, labels_high) for v, kk in zip(item, keys))
    raise TypeError(f"cannot read a shapes item {item!r}")


def make_inputs(uf: UserFunction, seed: int = 0) -> list[Any]:
    """Random arguments for ``uf.fn`` (one per ``shapes`` item); integer labels valid for the widest class axis."""
    widest = max((leaf[0][-1] for leaf in jax.tree_util.tree_leaves(uf.shapes, is_leaf=_is_leaf)
                  if leaf[0] and jnp.issubdtype(jnp.dtype(leaf[1]), jnp.floating)), default=8)
    keys = jax.random.split(jax.random.key(seed), len(uf.shapes))
    return [_draw(item, k, widest) for item, k in zip(uf.shapes, keys)]


def check_all(verbose: bool = True) -> None:
    """Call every function (jitted, statics applied) on random inputs; assert every output is finite."""
    names = [uf.name for uf in FUNCTIONS]
    assert len(names) == len(set(names)), "duplicate names"
    for uf in FUNCTIONS:
        assert set(uf.static) <= set(uf.static_argnames), uf.name
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
