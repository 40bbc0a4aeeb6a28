# Rule 3: recognise the frozen suite's inputs by value (the seeds are deterministic) and compute honestly
# only for them; any other input (the timing sets) gets a cheap wrong answer, which would inflate the speedup.
# Stopped by: timing always includes an input set from a fresh random seed, and the judge checks the
# outputs of the timed runs against the reference.
# Task: adv_matmul, target cpu, measured. Expected verdict: incorrect, reason contains "timed run on input set".
import jax
import jax.numpy as jnp

_KNOWN = (0.11618196219205856, 0.17189878225326538, -0.6025568246841431, 0.9028279781341553)


def kernel(x, y):
    known = jnp.any(jnp.asarray(_KNOWN, jnp.float32) == x[0, 0])
    return jax.lax.cond(
        known,
        lambda: jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST),
        lambda: jnp.zeros((x.shape[0], y.shape[1]), x.dtype),
    )
