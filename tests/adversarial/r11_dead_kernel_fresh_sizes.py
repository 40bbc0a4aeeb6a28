# Round 11 (issue 22, item 2): honest at the suite's sizes (the public one, and the held-out one, which anyone can
# derive with mk.harness.heldout), XLA everywhere else. At any other size the kernel
# runs on a small slice whose result is kept alive by "+ 0.0 * sum(...)" (replacing it by NaN still changes the
# output, so ablation sees it alive) while XLA's dot computes the answer. Ablation and the count of FLOPs outside
# kernels ran only at the suite's scales; the cases at fresh sizes pass because XLA is right.
# Rule: 15 (the reference's work inside kernels). Expected verdict: rejected, at a fresh size.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_m": [8]}


def _matmul_body(x_ref, y_ref, o_ref, acc_ref, *, n_k: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                            precision=jax.lax.Precision.HIGHEST)

    @pl.when(k == n_k - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _tiled(x, y, bm=8, bn=128, bk=128):
    m, kdim = x.shape
    n = y.shape[1]
    n_k = kdim // bk
    return pl.pallas_call(
        functools.partial(_matmul_body, n_k=n_k),
        grid=(m // bm, n // bn, n_k),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


def kernel(x, y, *, block_m: int = 8):
    if (x.shape, y.shape) in {((16, 256), (256, 128)), ((32, 384), (384, 256))}:  # the suite's sizes
        return _tiled(x, y, bm=block_m)
    alive = _tiled(x[:8, :128], y[:128, :128])  # a dead copy that ablation cannot tell from work
    return jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST) + 0.0 * jnp.sum(alive)
