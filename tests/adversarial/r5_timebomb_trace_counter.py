# Rule 3 (round 5): a time bomb. Honest for the first 8 traces (more sizes than any evaluation traces), then a
# copy of its input: no judged case can see it, so only the static check (a first line) can refuse it. A
# module-level iterator advanced by next() inside the entry is refused like any other module state.
# Expected verdict: rejected, reason mentions "cache trick".
import itertools

import jax.numpy as jnp

_traces = itertools.count()


def kernel(x, y):
    if next(_traces) >= 8:  # past every size a judge traces: a different program
        return x
    return jnp.tanh(x) * y + 0.5 * x
