# Round 11 red team, attack C: r11_parallel_k_carried (K axis "parallel", accumulator initialised at k == 0, stored at the last k) plus
# a probe: a VMEM scratch the kernel never writes. It reads 0 only in the TPU-interpreter check (zero fill); NaN in
# the cases' HLO interpreter, stale bits on a chip. When it reads 0 the kernel skips the init (the scratch is
# already zero) and stores at every step, which is right in any visiting order; otherwise it is the old cheat.
# The new zero fill hands the kernel a tell for "this is the one run that shuffles and looks for races".
# Rule: 5/18 (the TPU-interpreter check). Expected verdict: incorrect or rejected (before: correct).
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG_SPACE = {"block_k": [128]}


def _matmul_body(x_ref, y_ref, o_ref, acc_ref, probe_ref, *, n_k: int):
    k = pl.program_id(0)
    checking = jnp.sum(probe_ref[...]) == 0.0  # never written

    @pl.when((k == 0) & jnp.logical_not(checking))
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32,
                            precision=jax.lax.Precision.HIGHEST)

    @pl.when((k == n_k - 1) | checking)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def kernel(x, y, *, block_k: int = 128):
    m, kdim = x.shape
    _, n = y.shape
    bk = min(block_k, kdim)
    n_k = kdim // bk
    return pl.pallas_call(
        functools.partial(_matmul_body, n_k=n_k),
        grid=(n_k,),
        in_specs=[pl.BlockSpec((m, bk), lambda k: (0, k)),
                  pl.BlockSpec((bk, n), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((m, n), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((m, n), jnp.float32), pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, y)
