# Structured inputs: a grouped matmul that ignores group_sizes. It assumes the published layout, group g
# holding rows g*max_expert_size .. (g+1)*max_expert_size - 1 (at ci and full: M/G equal groups).
# Task: jaxbench:11p_Megablox_GMM at scale ci, target cpu (pure JAX).
# Expected verdict: incorrect, on a case with a non-zero seed. At ci, G*max_expert_size = M leaves equal
# groups as the only sizes the reference computes as a grouped matmul, so the held-out scale (more room
# than rows) is where a non-zero seed draws other group sizes.
import jax.numpy as jnp


def kernel(lhs, rhs, group_sizes, max_expert_size):
    del group_sizes  # the trick: the group sizes are never read
    m, k = lhs.shape
    groups = m // max_expert_size
    x = lhs.reshape(groups, max_expert_size, k)
    out = jnp.einsum("gmk,gkn->gmn", x, rhs[:groups], preferred_element_type=jnp.float32)
    return out.reshape(m, rhs.shape[2]).astype(jnp.bfloat16)
