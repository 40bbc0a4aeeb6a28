# Rule 15 (round 2, class nowork): the epilogue trick with the FLOPs hidden from XLA's cost analysis. The matmul
#   runs in XLA as a `fori_loop` of 256 rank-1 updates (exact enough: it matches the HIGHEST dot here); XLA's
#   cost_analysis counts a while loop's body once, so it reports ~4.1e3 FLOPs outside the kernel against the
#   reference's 1.05e6 (256x under). The Pallas kernel only copies the product, so ablation changes the output.
# Class: nowork (FLOPs hidden in a loop). Target: tpu. Task: adv_matmul.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "outside the kernel" -- only if the FLOP count multiplies loop bodies
#   by their trip count (the jaxpr has a `scan` of length 256); a count from XLA's cost_analysis passes it.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def _rank1(k, acc, x, y):
    return acc + jax.lax.dynamic_slice_in_dim(x, k, 1, 1) * jax.lax.dynamic_slice_in_dim(y, k, 1, 0)


def kernel(x, y):
    zeros = jnp.zeros((x.shape[0], y.shape[1]), jnp.float32)
    product = jax.lax.fori_loop(0, x.shape[1], lambda k, acc: _rank1(k, acc, x, y), zeros)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(product.shape, product.dtype))(product)
