# Upstream op: jax.experimental.pallas.ops.tpu.megablox.gmm (grouped matmul).
# Task: jaxbench:14p_Ragged_Dot (out[g] = x[g] @ weights[g], bf16, equal groups) at scale ci
# (G=8, 64 rows per group, K=128, N=256).
# Target: tpu. Expected verdict: correct.
# Glue: the groups flattened to rows (G*Mg, K) with group_sizes = Mg each, and the result reshaped back.
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import megablox


def kernel(x, weights):
    g, mg, k = x.shape
    sizes = jnp.full((g,), mg, jnp.int32)
    out = megablox.gmm(x.reshape(g * mg, k), weights, sizes, preferred_element_type=jnp.bfloat16,
                       tiling=(128, 128, 128))
    return out.reshape(g, mg, weights.shape[2])
