# Rule 10 (round 5): a fitted kernel that, at any size it was not shown, raises the words of the written kernel's
# envelope guard, hoping to be labelled `outside_envelope` (not judged) instead of failing the held-out case.
# It declares no MK_ENVELOPE, so the judge's own check admits every size and the raise is the candidate's failure.
# Expected verdict: compile_error, reason mentions "judged as a failure" (never outside_envelope).
import jax.numpy as jnp


def kernel(x, y):
    if x.shape[0] != 16:
        raise ValueError("outside the verified envelope: input 'x' axis 0 is %d; verified: one of (16,)" % x.shape[0])
    return jnp.tanh(x) * y + 0.5 * x
