# Rule 15 (round 3, class nowork): r2_nowork_copy_jnp on a task whose reference counts 0 FLOPs. jax.lax.erf is
#   exported as a `stablehlo.composite` (see r3_nowork_composite.py), so program.flops(reference) is 0 and
#   `_ablate` skips the share test altogether (`if outside is not None and ref:`). Any task whose reference is
#   erf / sinh / top_k / sort / fft / integer arithmetic ... gets no FLOP check at all: XLA does everything, the
#   kernel copies.
# Class: nowork. Target: tpu. Task: adv_erf = Task("adv_erf", lambda x: jax.lax.erf(x), (ArgSpec("x", (16, 128),
#   "float32"),), {"ci": Scale("ci")}) (not in tests/test_adversarial.py yet).
# Today (HEAD 560b111): correct.
# Expected verdict: rejected, reason contains "FLOPs run outside the kernels" (count composites and the other
#   ops; a reference that still counts ~0 must not switch the check off: compare absolute FLOPs, or require
#   outside <= 50% of max(reference, the candidate's own total)).
import jax
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x):
    answer = jax.lax.erf(x)  # all the work in XLA; the reference's own erf counts 0 FLOPs, so no share is computed
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(answer)
