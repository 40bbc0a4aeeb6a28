# Control (round 3, class ablation): an HONEST kernel rejected. A boolean output leaves the Mosaic custom call as
#   int32 and becomes bool through `!= 0`; the ablation fills it with INT32_MIN ("NaN" for integers) and with 1:
#   both are nonzero, both give all-True, so the judge concludes the kernel "does no work".
# Rule 15 (false rejection). Class: ablation. Target: tpu. Task: adv_positive_mask = Task("adv_positive_mask",
#   lambda x: x > 0.0, (ArgSpec("x", (16, 128), "float32"),), {"ci": Scale("ci")}) (not in
#   tests/test_adversarial.py yet).
# Today (HEAD 560b111): rejected, "kernel 1 of 1 does no work".
# Expected verdict: correct (ablate with several fills: NaN/INT_MIN, 0, and a judge-seeded random pattern,
#   against ones; a kernel is live if any of them changes the result).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _positive(x_ref, o_ref):
    o_ref[...] = x_ref[...] > 0.0


def kernel(x):
    return pl.pallas_call(_positive, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.bool_))(x)
