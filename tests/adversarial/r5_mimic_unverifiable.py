# Rule 10 (round 5): a fitted kernel that raises an interpreter limit's words at any size it was not shown, hoping
# to be labelled `unverifiable_here` ("this machine cannot run it") instead of failing the held-out case. The
# error is raised by the candidate's own code (the tracer reports its origin), so it is judged as a failure.
# Expected verdict: compile_error, reason mentions "judged as a failure" (never unverifiable_here).
import jax.numpy as jnp

_LIMIT = "not implemented " + "in interpret mode"  # built, so the words are not a literal of this file


def kernel(x, y):
    if x.shape[0] != 16:
        raise NotImplementedError(_LIMIT)
    return jnp.tanh(x) * y + 0.5 * x
