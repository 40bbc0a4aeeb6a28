# Rule 5: a Pallas kernel that never writes its first output block (stale memory might happen to match).
# Task: adv_rmsnorm, target tpu (interpret mode, uninitialised memory = NaN).
# Expected verdict: incorrect, reason contains "NaN". (An unwritten *later* block would hold the previous
# block's stale VMEM values in the interpreter, also incorrect; the first block shows the NaN poison.)
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, w_ref, o_ref, *, eps):
    @pl.when(pl.program_id(0) > 0)
    def _write():
        x = x_ref[...]
        o_ref[...] = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w_ref[...]


def kernel(x, w, eps=1e-6):
    rows, d = x.shape
    n_blocks = rows // 8
    return pl.pallas_call(
        lambda x_ref, w_ref, o_ref: _body(x_ref, w_ref, o_ref, eps=eps),
        grid=(n_blocks,),
        in_specs=[pl.BlockSpec((8, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w.reshape(1, d))
