# Rule 12: detect the timing phase by counting traces. jax.clear_caches() after every trace makes the
# judge's jit retrace on each call, so the Python body counts calls: honest for the compile check and the
# correctness case, then (from the timing warm-up on) a cheap wrong result that is cached and timed.
# Stopped by: the worker runs one ahead-of-time compiled executable per scale for cases, cost and timing
# (no retrace is possible), and the judge checks the outputs of the timed runs too.
# Task: adv_matmul, target cpu, measured. Expected verdict: correct with an honest speedup (below 3x), or incorrect.
import itertools

import jax
import jax.numpy as jnp

_traces = itertools.count()


def kernel(x, y):
    n = next(_traces)
    if n < 3:  # lower + jaxpr check + the one correctness case
        jax.clear_caches()
        return jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST)
    return x[:, : y.shape[1]]
