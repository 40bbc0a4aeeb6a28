"""Gated MLP (SwiGLU) on TPU (Mosaic) with both up-projections and the down-projection fused.

``out = act(x @ wg, x @ wu) @ wd`` for x (M, E), wg/wu (E, F), wd (F, D). The
grid runs over row blocks and hidden blocks (the hidden axis last, a
reduction): each step multiplies the row block by one (E, block_f) slice of
both gate and up weights, applies the activation to the two (block_m,
block_f) products in VMEM and adds that hidden block's contribution to an f32
(block_m, D) accumulator through the matching (block_f, D) slice of wd. The
(M, F) hidden activations never go to HBM. The products before the activation
come out in ``inter_dtype`` (the inputs' dtype by default, as ``jnp.dot``
returns them), so a bf16 reference's rounding is kept.

Self-contained (jax only): mk's offline author copies it verbatim into the
kernels it writes.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _silu_gate(g, u):
    return jax.nn.sigmoid(g) * g * u


def _swiglu_tpu_kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref, acc_ref, *, nf, activation, inter_dtype, precision):
    f = pl.program_id(1)

    @pl.when(f == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    dims = (((1,), (0,)), ((), ()))
    x = x_ref[...]
    g = lax.dot_general(x, wg_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)
    u = lax.dot_general(x, wu_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)
    h = activation(g.astype(inter_dtype), u.astype(inter_dtype)).astype(wd_ref.dtype)
    acc_ref[...] += lax.dot_general(h, wd_ref[...], dims, precision=precision, preferred_element_type=jnp.float32)

    @pl.when(f == nf - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _block(n, want, quantum):
    """The largest multiple of quantum dividing n and at most want; n itself when none does."""
    for b in range(min(want, n) // quantum * quantum, 0, -quantum):
        if n % b == 0:
            return b
    return n


def swiglu_tpu(x, wg, wu, wd, *, activation=None, inter_dtype=None, out_dtype=None, precision=None, block_m=128,
               block_f=256):
    """``activation(x @ wg, x @ wu) @ wd`` (default ``silu(g) * u``); x (M, E), wg/wu (E, F), wd (F, D)."""
    (m, e), (e2, f), (f2, d) = x.shape, wg.shape, wd.shape
    if e != e2 or wu.shape != wg.shape or f != f2:
        raise ValueError(f"expected x (M, E), wg/wu (E, F), wd (F, D), got {x.shape=}, {wg.shape=}, {wu.shape=}, "
                         f"{wd.shape=}")
    sublanes = 8 * max(1, 4 // jnp.dtype(x.dtype).itemsize)
    bm, bf = _block(m, block_m, sublanes), _block(f, block_f, 128)
    return pl.pallas_call(
        functools.partial(_swiglu_tpu_kernel, nf=f // bf, activation=activation or _silu_gate,
                          inter_dtype=inter_dtype or x.dtype, precision=precision),
        grid=(m // bm, f // bf),
        in_specs=[pl.BlockSpec((bm, e), lambda i, j: (i, 0)),
                  pl.BlockSpec((e, bf), lambda i, j: (0, j)),
                  pl.BlockSpec((e, bf), lambda i, j: (0, j)),
                  pl.BlockSpec((bf, d), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((bm, d), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, d), out_dtype or x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x, wg, wu, wd)
