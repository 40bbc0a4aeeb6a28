# Rule 15 (round 3, class nowork): r2_nowork_loop_hidden_flops with a loop the trip-count reader does not know.
#   program._trip_count only understands `arg < constant` from a constant start; this `while_loop` stops on
#   `k != 256` (a bound carried in the loop state, `c[0] < c[2]`, or a float counter miss it the same way), so its
#   body (the 256 rank-1 updates of the whole matmul) is counted once: 4.1e3 of the reference's 1.05e6 FLOPs.
# Class: nowork (FLOPs hidden in a loop). Target: tpu. Task: adv_matmul.
# Today (HEAD 560b111): correct (outside share 0.4%).
# Expected verdict: rejected, reason contains "FLOPs run outside the kernels" (a loop whose trip count cannot be
#   read must not count as one iteration: take the bound from any compare against a constant, or reject/flag
#   loops outside kernels whose count is unknown).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    def body(c):
        k, acc = c
        return k + 1, acc + jax.lax.dynamic_slice_in_dim(x, k, 1, 1) * jax.lax.dynamic_slice_in_dim(y, k, 1, 0)

    start = (0, jnp.zeros((x.shape[0], y.shape[1]), jnp.float32))
    _, product = jax.lax.while_loop(lambda c: c[0] != x.shape[1], body, start)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(product.shape, product.dtype))(product)
