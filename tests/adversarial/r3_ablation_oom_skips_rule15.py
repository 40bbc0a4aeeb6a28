# Rule 15 (round 3, class ablation): make the ablation fail so that rule 15 is only a flag. All the work is in XLA
#   (100% outside: rejected whenever the ablation runs). A 64 MiB incompressible constant rides along as an unused
#   kernel operand: the cases (one program each) fit in the runner's memory, the ablation (the target program as
#   MLIR text, n+2 compiled variants that JAX's caches keep alive) hits RLIMIT_DATA, the runner answers
#   "MemoryError: std::bad_alloc", and `_ablate` only appends "kernel ablation could not run" to the flags.
# Class: ablation. Target: tpu, memory_limit_mb=1100 (the same ratio works at the default limit with ~0.7 GiB).
#   Task: adv_tanh_mix.
# Today (HEAD 560b111): correct, flags "kernel ablation could not run (MemoryError: std::bad_alloc)".
# Expected verdict: rejected or crashed, never correct: an ablation that cannot run must end the evaluation
#   (`_ablate`: `if not reply.get("ok")` -> _Verdict), and programs above a size cap are refused up front.
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

_PAD = np.random.default_rng(0).standard_normal(16 << 20).astype(np.float32)


def _copy(a_ref, p_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    answer = jnp.tanh(x) * y + 0.5 * x  # all the work in XLA
    pad = jnp.asarray(_PAD)[: x.size].reshape(x.shape)
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(answer, pad)
