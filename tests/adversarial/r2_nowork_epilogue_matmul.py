# Rule 15 (round 2, class nowork): epilogue-only kernel. The matmul runs in XLA (`x @ y`, HIGHEST); the Pallas
#   kernel only adds a zero bias to the finished product. Live, and ablation changes the output, so only the FLOP
#   count catches it: all 2*M*N*K reference FLOPs run outside the kernel.
# Class: nowork. Target: tpu. Task: adv_matmul.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "outside the kernel" (reference FLOPs counted outside kernels).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _add_bias(acc_ref, b_ref, o_ref):
    o_ref[...] = acc_ref[...] + b_ref[...]


def kernel(x, y):
    acc = jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST)
    bias = jnp.zeros((1, acc.shape[1]), acc.dtype)
    return pl.pallas_call(_add_bias, out_shape=jax.ShapeDtypeStruct(acc.shape, acc.dtype))(acc, bias)
