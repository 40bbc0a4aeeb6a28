"""Flash attention on GPU (Pallas Triton): ``softmax(q k^T * scale + bias [causal]) v``.

The same computation as :mod:`mk.kernels.flash_attention.tpu` (q (B, H, Sq, D),
k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv), an optional rank-4 bias broadcastable to (B, H, Sq, Sk),
or a score modification ``mod(s, *tiles)`` over a tuple of such arrays).
One program per (batch*head, query block) loops over key blocks with
``lax.fori_loop`` (Triton has no scratch memory). Two schedules:

- ``flash_attention_gpu``: one pass with an online softmax (running max and
  sum, the f32 accumulator rescaled at each block);
- ``flash_attention_gpu_two_pass``: a first pass over the key blocks finds
  each row's max and sum, a second accumulates the already normalised
  probabilities times v (no rescaling, the scores computed twice).

When causal the loops stop at the diagonal and only the blocks it crosses are
masked. Triton needs power-of-two blocks: a head_dim that is no power of two
is zero-padded (zero columns change no score and are sliced off), a sequence
no power-of-two block >= 16 divides is zero-padded to a multiple of the block
and the padded keys are masked.

Block sizes are requests: each program holds a query block, ``num_stages`` key and value blocks (Triton's
pipeline) and an f32 accumulator, so a wide head_dim shrinks them at trace time (`_fa_fit`) until the estimated
shared memory fits ``smem_bytes`` (the chip's budget) and the accumulator and score tile stay within registers.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


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


def _fa_block(n, want):
    """(block, padded n): the largest power of two >= 16 and at most want dividing n; when none does, a power of
    two block (at most want) with n padded to a multiple of it."""
    b = 1 << (want.bit_length() - 1)
    while b >= 16:
        if n % b == 0:
            return b, n
        b //= 2
    b = max(16, min(1 << (want.bit_length() - 1), 1 << (n - 1).bit_length()))
    return b, -(-n // b) * b


def _fa_fit(block_q, block_k, *, d, dv, itemsize, bias_bytes, num_warps, num_stages, smem_bytes):
    """(block_q, block_k) halved until the program's Triton working set fits: shared memory (the q block, then
    ``num_stages`` buffers of the k and v blocks and of a bias tile, ``bias_bytes`` an element) within
    ``smem_bytes``, and the f32 accumulator plus score tile within about 96 registers a thread. Shrinks query
    rows for registers, and the larger of the two shared-memory terms for shared memory; never below 16."""
    def smem(bq, bk):
        return (bq * d + num_stages * bk * (d + dv)) * itemsize + num_stages * bq * bk * bias_bytes

    def regs(bq, bk):
        return bq * (dv + bk) // (32 * num_warps)

    bq, bk = block_q, block_k
    while True:
        over_regs, over_smem = regs(bq, bk) > 96, smem(bq, bk) > smem_bytes
        if over_regs and bq > 16:
            bq //= 2
        elif over_smem and bk > 16 and (num_stages * bk * (d + dv) >= bq * d or bq <= 16):
            bk //= 2
        elif over_smem and bq > 16:
            bq //= 2
        elif (over_regs or over_smem) and bk > 16:
            bk //= 2
        else:
            return bq, bk


def _sides(bias):
    """The bias argument as a tuple of arrays: none, the one additive bias, or a score mod's inputs."""
    return () if bias is None else tuple(bias) if isinstance(bias, (tuple, list)) else (bias,)


def _tile_scores(q, k, tiles, *, scale, score_dtype, mod=None):
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


def _score_fn(q, k_ref, b_refs, *, qi, scale, causal, score_dtype, block_q, block_k, kv_len, mod):
    """The (block_q, block_k) f32 scores of key block j, masked when asked (causal, or padded keys)."""

    def scores(j, masked):
        start = pl.multiple_of(j * block_k, block_k)
        k = k_ref[pl.ds(start, block_k), :]
        tiles = tuple(b[:, pl.ds(start, block_k)] if b.shape[1] > 1 else b[...] for b in b_refs)
        s = _tile_scores(q, k, tiles, scale=scale, score_dtype=score_dtype, mod=mod)
        if masked:
            rows = qi * block_q + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
            cols = start + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
            keep = cols < kv_len  # padded keys
            if causal:
                s = jnp.where(keep & (cols <= rows), s, _MASKED)
            else:  # padded keys: below any fill a score mod writes, so a row it masks wholly stays its own
                s = jnp.where(keep, s, _MASKED if mod is None else -jnp.inf)
        return s, start

    return scores


def _ranges(qi, *, causal, block_q, block_k, nk, kv_len):
    """(n_full, n_end): key blocks [0, n_full) need no mask, [n_full, n_end) are masked, the rest never read."""
    if causal:  # a block is unmasked when it is wholly below the diagonal and holds no padded key (Sq > Sk pads)
        return (jnp.minimum((qi * block_q + 1) // block_k, kv_len // block_k),
                jnp.minimum(((qi + 1) * block_q + block_k - 1) // block_k, nk))
    return kv_len // block_k, nk


def _one_pass_kernel(*refs, scale, causal, score_dtype, block_q, block_k, nk, kv_len, n_sides, mod):
    q_ref, k_ref, v_ref, *b_refs, o_ref = refs
    qi = pl.program_id(1)
    q = q_ref[...]
    scores = _score_fn(q, k_ref, b_refs, qi=qi, scale=scale, causal=causal, score_dtype=score_dtype,
                       block_q=block_q, block_k=block_k, kv_len=kv_len, mod=mod)

    def step(j, carry, masked):
        m, l, acc = carry
        s, start = scores(j, masked)
        v = v_ref[pl.ds(start, block_k), :]
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        alpha = jnp.exp(m - _shift(m_new))
        p = jnp.exp(s - _shift(m_new)[:, None])
        l = alpha * l + jnp.sum(p, axis=1)
        acc = alpha[:, None] * acc + lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32, precision=_hp(p.astype(v.dtype), v))
        return m_new, l, acc

    n_full, n_end = _ranges(qi, causal=causal, block_q=block_q, block_k=block_k, nk=nk, kv_len=kv_len)
    carry = (jnp.full((block_q,), _start(mod), jnp.float32), jnp.zeros((block_q,), jnp.float32),
             jnp.zeros((block_q, v_ref.shape[1]), jnp.float32))
    carry = lax.fori_loop(0, n_full, functools.partial(step, masked=False), carry)
    carry = lax.fori_loop(n_full, n_end, functools.partial(step, masked=True), carry)
    _, l, acc = carry
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)


def _two_pass_kernel(*refs, scale, causal, score_dtype, block_q, block_k, nk, kv_len, n_sides, mod):
    q_ref, k_ref, v_ref, *b_refs, o_ref = refs
    qi = pl.program_id(1)
    q = q_ref[...]
    scores = _score_fn(q, k_ref, b_refs, qi=qi, scale=scale, causal=causal, score_dtype=score_dtype,
                       block_q=block_q, block_k=block_k, kv_len=kv_len, mod=mod)

    def stats(j, carry, masked):
        m, l = carry
        s, _ = scores(j, masked)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        return m_new, jnp.exp(m - _shift(m_new)) * l + jnp.sum(jnp.exp(s - _shift(m_new)[:, None]), axis=1)

    n_full, n_end = _ranges(qi, causal=causal, block_q=block_q, block_k=block_k, nk=nk, kv_len=kv_len)
    carry = (jnp.full((block_q,), _start(mod), jnp.float32), jnp.zeros((block_q,), jnp.float32))
    carry = lax.fori_loop(0, n_full, functools.partial(stats, masked=False), carry)
    m, l = lax.fori_loop(n_full, n_end, functools.partial(stats, masked=True), carry)
    inv = 1.0 / l

    def accumulate(j, acc, masked):
        s, start = scores(j, masked)
        v = v_ref[pl.ds(start, block_k), :]
        p = jnp.exp(s - m[:, None]) * inv[:, None]
        return acc + lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())),
                                     preferred_element_type=jnp.float32, precision=_hp(p.astype(v.dtype), v))

    acc = jnp.zeros((block_q, v_ref.shape[1]), jnp.float32)
    acc = lax.fori_loop(0, n_full, functools.partial(accumulate, masked=False), acc)
    acc = lax.fori_loop(n_full, n_end, functools.partial(accumulate, masked=True), acc)
    o_ref[...] = acc.astype(o_ref.dtype)


def _side_index(bh, i, *, full, heads):
    """A bias block's index: its size-1 axes always block 0, the others follow (batch, head, query block)."""
    return (bh // heads if full[0] else 0, bh % heads if full[1] else 0, i if full[2] else 0, 0)


def _call(body, q, k, v, bias, *, scale, causal, score_dtype, block_q, block_k, num_warps, num_stages, smem_bytes,
          mod=None):
    batch, heads, seq, head_dim = q.shape
    kv_batch, kv_heads, kv_seq, kv_dim = k.shape
    if v.shape[:3] != k.shape[:3] or kv_batch != batch or kv_dim != head_dim or heads % kv_heads:
        raise ValueError(f"expected q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv) with H a multiple of Hkv, got {q.shape=}, "
                         f"{k.shape=}, {v.shape=}")
    group = heads // kv_heads
    v_dim = v.shape[3]
    d_pad, dv_pad = (max(16, 1 << (n - 1).bit_length()) for n in (head_dim, v_dim))
    sides = _sides(bias)
    if mod is None and len(sides) > 1:
        raise ValueError("several bias arrays need a score mod that combines them")
    bias_bytes = sum(b.dtype.itemsize for b in sides)
    block_q, block_k = _fa_fit(_fa_block(seq, block_q)[0], _fa_block(kv_seq, block_k)[0], d=d_pad, dv=dv_pad,
                               itemsize=q.dtype.itemsize, bias_bytes=bias_bytes, num_warps=num_warps,
                               num_stages=num_stages, smem_bytes=smem_bytes)
    block_q, q_pad = _fa_block(seq, block_q)
    block_k, kv_pad = _fa_block(kv_seq, block_k)
    q = jnp.pad(q, ((0, 0), (0, 0), (0, q_pad - seq), (0, d_pad - head_dim)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, kv_pad - kv_seq), (0, d_pad - head_dim)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, kv_pad - kv_seq), (0, dv_pad - v_dim)))
    in_specs = [
        pl.BlockSpec((None, None, block_q, d_pad), lambda bh, i: (bh // heads, bh % heads, i, 0)),
        pl.BlockSpec((None, None, kv_pad, d_pad), lambda bh, i: (bh // heads, (bh % heads) // group, 0, 0)),
        pl.BlockSpec((None, None, kv_pad, dv_pad), lambda bh, i: (bh // heads, (bh % heads) // group, 0, 0)),
    ]
    args = [q, k, v]
    for bias in sides:
        want = (batch, heads, seq, kv_seq)
        if bias.ndim != 4 or any(b not in (1, w) for b, w in zip(bias.shape, want)):
            raise ValueError(f"expected a bias broadcastable to {want}, got {bias.shape=}")
        full = tuple(n > 1 for n in bias.shape)
        bias = jnp.pad(bias, ((0, 0), (0, 0), (0, q_pad - seq if full[2] else 0), (0, kv_pad - kv_seq if full[3] else 0)))
        in_specs.append(pl.BlockSpec(
            (None, None, block_q if full[2] else 1, kv_pad if full[3] else 1),
            functools.partial(_side_index, full=full, heads=heads)))
        args.append(bias)
    out = pl.pallas_call(
        functools.partial(body, scale=scale, causal=causal, score_dtype=score_dtype, block_q=block_q,
                          block_k=block_k, nk=kv_pad // block_k, kv_len=kv_seq, n_sides=len(sides), mod=mod),
        grid=(batch * heads, q_pad // block_q),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((None, None, block_q, dv_pad), lambda bh, i: (bh // heads, bh % heads, i, 0)),
        out_shape=jax.ShapeDtypeStruct((batch, heads, q_pad, dv_pad), q.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
    )(*args)
    return out[:, :, :seq, :v_dim]


def flash_attention_gpu(q, k, v, bias=None, *, scale, causal=False, score_dtype=None, block_q=64, block_k=64,
                        num_warps=4, num_stages=2, smem_bytes=192 << 10, mod=None):
    """One pass over the key blocks with an online softmax (see the module docstring)."""
    return _call(_one_pass_kernel, q, k, v, bias, scale=scale, causal=causal, score_dtype=score_dtype,
                 block_q=block_q, block_k=block_k, num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes,
                 mod=mod)


def flash_attention_gpu_two_pass(q, k, v, bias=None, *, scale, causal=False, score_dtype=None, block_q=64,
                                 block_k=64, num_warps=4, num_stages=2, smem_bytes=192 << 10, mod=None):
    """Row max and sum first, then the normalised probabilities times v (see the module docstring)."""
    return _call(_two_pass_kernel, q, k, v, bias, scale=scale, causal=causal, score_dtype=score_dtype,
                 block_q=block_q, block_k=block_k, num_warps=num_warps, num_stages=num_stages, smem_bytes=smem_bytes,
                 mod=mod)
