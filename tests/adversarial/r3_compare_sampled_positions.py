# Rule 4 (round 3, class compare): the correlation check that stops zeros under a loose atol looks at a fixed
#   sample: every (n // 1_000_000 + 1)-th element of the flattened output. For n > 1M those positions are known in
#   advance, so the candidate computes only them (a third of the work at 2M elements) and leaves zeros elsewhere:
#   every value is within atol=0.1 of 0.05*tanh(x), and the sampled ones correlate perfectly. (rule04_zeros.py at
#   this size is caught: pearson 0.)
# Class: compare. Target: cpu. Task: adv_small_big = Task("adv_small_big", lambda x: 0.05 * jnp.tanh(x),
#   (ArgSpec("x", (1024, 2048), "float32"),), {"ci": Scale("ci")}, tolerance=Tolerance(0.1, 0.0)) (not in
#   tests/test_adversarial.py yet).
# Today (HEAD 560b111): correct.
# Expected verdict: incorrect, reason contains "uncorrelated" (compare._uncorrelated over every element, from
#   chunked running sums of r, c, r*r, c*c, r*c, or over positions drawn from a secret per-comparison seed).
import jax.numpy as jnp


def kernel(x):
    step = x.size // 1_000_000 + 1
    flat = x.reshape(-1)
    return jnp.zeros_like(flat).at[::step].set(0.05 * jnp.tanh(flat[::step])).reshape(x.shape)
