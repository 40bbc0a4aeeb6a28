"""Flash attention on TPU (Mosaic): ``softmax(q k^T * scale + bias [causal]) v`` with an online softmax.

q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv) (grouped-query attention when Hkv < H:
query head h reads kv head h // (H // Hkv)), an optional additive score bias
of rank 4 broadcastable to (B, H, Sq, Sk) (its size-1 axes are read
repeatedly, never materialised). A score modification ``mod`` (FlexAttention's
``score_mod``: a mask, a soft cap, a sliding window) replaces the scale and the
bias: ``mod(s, *tiles)`` gets each (block_q, block_k) f32 tile of q k^T and the
matching tiles of the ``bias`` arrays (then a tuple of rank-4 arrays, each
broadcastable as above) and returns the scores the softmax sees. Two schedules
over the same step:

- ``flash_attention_tpu``: key blocks are the grid's last ("arbitrary") axis;
  the running max, sum and f32 accumulator live in VMEM scratch across it.
  When causal, key blocks wholly above the diagonal are skipped and their
  index maps repeat the last block needed, so nothing is fetched for them.
- ``flash_attention_tpu_loop``: one grid step per query block holds the
  whole key/value sequence of its head in VMEM and walks key blocks with a
  ``lax.fori_loop`` carrying max, sum and accumulator as values; when causal
  the loop stops at the diagonal and only the blocks it crosses are masked.

``score_dtype`` (bf16/f16 or None) rounds the f32 score tiles as a 16-bit
reference rounds its scores (``einsum`` then ``* scale`` then ``+ bias`` in
that dtype). Block sizes are requests, fitted to the sizes the kernel is
called with.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _hp(*xs):
    """HIGHEST for float32 operands (Mosaic runs precision=None as one bf16 pass, Triton as TF32), else None."""
    return lax.Precision.HIGHEST if any(x.dtype == jnp.float32 for x in xs) else None

_MASKED = -1e30


def _start(mod):
    """The running max a row starts from: -inf under a score mod, whose fills may lie below _MASKED
    (``finfo.min``): a row they mask wholly is then uniform over its keys, as softmax makes it; -inf everywhere
    stays NaN, as softmax makes it."""
    return _MASKED if mod is None else -jnp.inf


def _shift(m):
    """The max subtracted before exp: 0 while a row has seen only -inf (exp(-inf - -inf) would be NaN)."""
    return jnp.where(m == -jnp.inf, 0.0, m)


def _fa_block(n, want, quantum):
    """The largest multiple of quantum dividing n and at most want; n itself (one block spanning the axis,
    always a legal block shape) when there is none."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def _sublanes(*arrays):
    return 8 * max(1, 4 // min(jnp.dtype(a.dtype).itemsize for a in arrays))


def _sides(bias):
    """The bias argument as a tuple of arrays: none, the one additive bias, or a score mod's inputs."""
    return () if bias is None else tuple(bias) if isinstance(bias, (tuple, list)) else (bias,)


def _scores(q, k, tiles, *, scale, score_dtype, mod=None):
    """The f32 score tile q k^T * scale (+ bias), rounded where a 16-bit reference rounds; with ``mod``, the tile
    q k^T given to it with the side tiles."""
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32, precision=_hp(q, k))
    if mod is not None:
        return mod(s, *tiles).astype(jnp.float32)
    bias = tiles[0] if tiles else None
    if score_dtype is None:
        s = s * scale
        return s if bias is None else s + bias.astype(jnp.float32)
    s = s.astype(score_dtype) * scale
    if bias is not None:
        s = s + bias.astype(score_dtype)
    return s.astype(jnp.float32)


def _fit(q, k, v, sides, block_q, block_k):
    batch, heads, seq, head_dim = q.shape
    kv_batch, kv_heads, kv_seq, kv_dim = k.shape
    if v.shape[:3] != k.shape[:3] or kv_batch != batch or kv_dim != head_dim or heads % kv_heads:
        raise ValueError(f"expected q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv) with H a multiple of Hkv, got {q.shape=}, "
                         f"{k.shape=}, {v.shape=}")
    arrays = (q, k, v, *sides)
    want = (batch, heads, seq, kv_seq)
    for bias in sides:
        if bias.ndim != 4 or any(b not in (1, w) for b, w in zip(bias.shape, want)):
            raise ValueError(f"expected a bias broadcastable to {want}, got {bias.shape=}")
    bq = _fa_block(seq, block_q, _sublanes(*arrays))
    # a bias block's last axis is a key block: a multiple of the lane width (128) or the whole sequence
    bk = _fa_block(kv_seq, block_k, 128 if any(b.shape[3] > 1 for b in sides) else _sublanes(k, v))
    return bq, bk


def _bias_spec(bias, block_q, block_k, index):
    """The bias BlockSpec: its size-1 axes always block 0, the others follow (batch, head, query, key) blocks."""
    full = tuple(n > 1 for n in bias.shape)
    shape = (1, 1, block_q if full[2] else 1, block_k if full[3] else 1)

    def imap(*grid):
        b, h, i, j = index(*grid)
        return (b if full[0] else 0, h if full[1] else 0, i if full[2] else 0, j if full[3] else 0)

    return pl.BlockSpec(shape, imap)


def _grid_kernel(*refs, scale, causal, score_dtype, block_q, block_k, nk, n_sides, mod):
    q_ref, k_ref, v_ref = refs[:3]
    b_refs = refs[3:3 + n_sides]
    o_ref, m_ref, l_ref, acc_ref = refs[3 + n_sides:]
    qi, ki = pl.program_id(2), pl.program_id(3)

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, _start(mod), jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def _step():
        v = v_ref[0, 0]
        s = _scores(q_ref[0, 0], k_ref[0, 0], tuple(b[0, 0] for b in b_refs), scale=scale,
                    score_dtype=score_dtype, mod=mod)
        if causal:
            rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = ki * block_k + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, _MASKED)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - _shift(m_new))
        p = jnp.exp(s - _shift(m_new))
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32, precision=_hp(p.astype(v.dtype), v))
        m_ref[...] = m_new

    if causal:
        pl.when(ki * block_k <= qi * block_q + block_q - 1)(_step)
    else:
        _step()

    @pl.when(ki == nk - 1)
    def _done():
        o_ref[0, 0] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def flash_attention_tpu(q, k, v, bias=None, *, scale, causal=False, score_dtype=None, block_q=512, block_k=512,
                        mod=None):
    """Key blocks on the grid's last axis with VMEM scratch accumulators (see the module docstring)."""
    batch, heads, seq, head_dim = q.shape
    kv_heads, kv_seq = k.shape[1], k.shape[2]
    group = heads // max(1, kv_heads)
    sides = _sides(bias)
    if mod is None and len(sides) > 1:
        raise ValueError("several bias arrays need a score mod that combines them")
    block_q, block_k = _fit(q, k, v, sides, block_q, block_k)
    nk = kv_seq // block_k

    def last(i, j):  # causal: key blocks past the diagonal repeat the last one needed (no new fetch)
        return jnp.minimum(j, (i * block_q + block_q - 1) // block_k) if causal else j

    v_dim = v.shape[3]
    in_specs = [pl.BlockSpec((1, 1, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0)),
                pl.BlockSpec((1, 1, block_k, head_dim), lambda b, h, i, j: (b, h // group, last(i, j), 0)),
                pl.BlockSpec((1, 1, block_k, v_dim), lambda b, h, i, j: (b, h // group, last(i, j), 0))]
    args = [q, k, v, *sides]
    in_specs += [_bias_spec(side, block_q, block_k, lambda b, h, i, j: (b, h, i, last(i, j))) for side in sides]
    return pl.pallas_call(
        functools.partial(_grid_kernel, scale=scale, causal=causal, score_dtype=score_dtype, block_q=block_q,
                          block_k=block_k, nk=nk, n_sides=len(sides), mod=mod),
        grid=(batch, heads, seq // block_q, nk),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((1, 1, block_q, v_dim), lambda b, h, i, j: (b, h, i, 0)),
        out_shape=jax.ShapeDtypeStruct((batch, heads, seq, v_dim), q.dtype),
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32), pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, v_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(*args)


def _loop_kernel(*refs, scale, causal, score_dtype, block_q, block_k, nk, n_sides, mod):
    q_ref, k_ref, v_ref = refs[:3]
    b_refs, o_ref = refs[3:3 + n_sides], refs[3 + n_sides]
    qi = pl.program_id(2)
    q = q_ref[0, 0]

    def step(j, carry, masked):
        m, l, acc = carry
        start = pl.multiple_of(j * block_k, block_k)
        k = k_ref[0, 0, pl.ds(start, block_k), :]
        v = v_ref[0, 0, pl.ds(start, block_k), :]
        tiles = tuple(b[0, 0, :, pl.ds(start, block_k)] if b.shape[3] > 1 else b[0, 0] for b in b_refs)
        s = _scores(q, k, tiles, scale=scale, score_dtype=score_dtype, mod=mod)
        if masked:
            rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, _MASKED)
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m - _shift(m_new))
        p = jnp.exp(s - _shift(m_new))
        l = alpha * l + jnp.sum(p, axis=1, keepdims=True)
        acc = alpha * acc + lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32, precision=_hp(p.astype(v.dtype), v))
        return m_new, l, acc

    carry = (jnp.full((block_q, 1), _start(mod), jnp.float32), jnp.zeros((block_q, 1), jnp.float32),
             jnp.zeros((block_q, v_ref.shape[3]), jnp.float32))
    if causal:  # blocks wholly at or below the diagonal unmasked, the ones it crosses masked, the rest never read
        n_full = jnp.minimum((qi * block_q + 1) // block_k, nk)
        n_end = jnp.minimum(((qi + 1) * block_q + block_k - 1) // block_k, nk)
        carry = lax.fori_loop(0, n_full, functools.partial(step, masked=False), carry)
        carry = lax.fori_loop(n_full, n_end, functools.partial(step, masked=True), carry)
    else:
        carry = lax.fori_loop(0, nk, functools.partial(step, masked=False), carry)
    _, l, acc = carry
    o_ref[0, 0] = (acc / l).astype(o_ref.dtype)


def flash_attention_tpu_loop(q, k, v, bias=None, *, scale, causal=False, score_dtype=None, block_q=256,
                             block_k=512, mod=None):
    """Whole key/value sequence per head in VMEM, key blocks walked in the kernel (see the module docstring)."""
    batch, heads, seq, head_dim = q.shape
    kv_heads, kv_seq = k.shape[1], k.shape[2]
    group = heads // max(1, kv_heads)
    sides = _sides(bias)
    if mod is None and len(sides) > 1:
        raise ValueError("several bias arrays need a score mod that combines them")
    block_q, block_k = _fit(q, k, v, sides, block_q, block_k)
    v_dim = v.shape[3]
    in_specs = [pl.BlockSpec((1, 1, block_q, head_dim), lambda b, h, i: (b, h, i, 0)),
                pl.BlockSpec((1, 1, kv_seq, head_dim), lambda b, h, i: (b, h // group, 0, 0)),
                pl.BlockSpec((1, 1, kv_seq, v_dim), lambda b, h, i: (b, h // group, 0, 0))]
    args = [q, k, v, *sides]
    in_specs += [_bias_spec(side, block_q, kv_seq, lambda b, h, i: (b, h, i, 0)) for side in sides]
    return pl.pallas_call(
        functools.partial(_loop_kernel, scale=scale, causal=causal, score_dtype=score_dtype, block_q=block_q,
                          block_k=block_k, nk=kv_seq // block_k, n_sides=len(sides), mod=mod),
        grid=(batch, heads, seq // block_q),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((1, 1, block_q, v_dim), lambda b, h, i: (b, h, i, 0)),
        out_shape=jax.ShapeDtypeStruct((batch, heads, seq, v_dim), q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
    )(*args)
