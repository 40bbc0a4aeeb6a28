# Rule 9/15 (round 3, class poison): the warm runner (mk/harness/pool.py) keeps every evaluation's programs alive:
#   `load` clears mk's own tables but not JAX's caches (jax.jit / export call caches hold the deserialized
#   modules and their executables, constants included), so each evaluation leaves about twice its programs'
#   constants resident (measured: +128 MiB per evaluation of a 64 MiB constant; `jax.clear_caches()` returns it).
#   This candidate (a 32 MiB constant, all work in XLA) evaluated 7 times in one process at memory_limit_mb=1100:
#   rejected (100% outside) x3, then correct x3 (the ablation now hits bad_alloc, see
#   r3_ablation_oom_skips_rule15.py), then crashed (a case runs out of memory). Later candidates, honest ones
#   included, inherit the runner's memory: their verdicts depend on what was judged before them.
# Class: poison (warm runner). Target: tpu, memory_limit_mb=1100, evaluated repeatedly in one process.
#   Task: adv_tanh_mix.
# Today (HEAD 560b111): rejected, rejected, rejected, correct, correct, correct, crashed.
# Expected verdict: rejected every time (runner.load: `jax.clear_caches()` before loading; the pool recycles a
#   runner whose resident memory after `load` exceeds its start-up size by a margin).
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

_PAD = np.random.default_rng(0).standard_normal(8 << 20).astype(np.float32)


def _copy(a_ref, p_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    answer = jnp.tanh(x) * y + 0.5 * x  # all the work in XLA
    pad = jnp.asarray(_PAD)[: x.size].reshape(x.shape)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(answer, pad)
