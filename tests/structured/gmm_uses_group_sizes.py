# Control: a grouped matmul that reads group_sizes: row r belongs to the group whose [start, end) holds it.
# Task: jaxbench:11p_Megablox_GMM at scale ci, target cpu (pure JAX).
# Expected verdict: correct (every case, every seed, the held-out scale included).
import jax
import jax.numpy as jnp


def kernel(lhs, rhs, group_sizes, max_expert_size):
    del max_expert_size  # a plain grouped matmul: the sizes the task draws never overflow a slab
    ends = jnp.cumsum(group_sizes)
    owner = jnp.searchsorted(ends, jnp.arange(lhs.shape[0]), side="right")  # group of each row

    def add(g, acc):
        part = jnp.dot(lhs, rhs[g], preferred_element_type=jnp.float32)
        return jnp.where((owner == g)[:, None], part, acc)

    out = jax.lax.fori_loop(0, rhs.shape[0], add, jnp.zeros((lhs.shape[0], rhs.shape[2]), jnp.float32))
    return out.astype(jnp.bfloat16)
