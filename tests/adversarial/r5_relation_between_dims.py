# Rule 10 (round 5): a kernel fitted to a relation between two dims that every judged size keeps. The held-out
# scale grows m (16 -> 32) and n (48 -> 64) by the same unit, so n = m + 32 at both; the kernel divides the row sum
# by m + 32 instead of n. Before round 5 the fresh size drew m and n independently and kept n = m + 32 in about a
# third of evaluations (then `correct`, with an envelope claiming any m and n). The strict fresh size now breaks
# every relation between two dims that all judged sizes keep.
# Expected verdict: incorrect, at a fresh size.
import jax.numpy as jnp


def kernel(x):
    return jnp.sum(x, axis=-1, keepdims=True) / (x.shape[0] + 32) * x
