# Rule 15 (round 2, class nowork): the pallas_call only copies a result jnp already computed. The kernel is live
#   (its output is the answer), so the worker's liveness walk and an ablation (kernel output -> NaN changes the
#   result) both pass it; only the FLOP count sees that the reference's arithmetic ran in XLA, outside any kernel.
# Class: nowork. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "outside the kernel" (reference FLOPs counted outside kernels).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    answer = jnp.tanh(x) * y + 0.5 * x
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(answer)
