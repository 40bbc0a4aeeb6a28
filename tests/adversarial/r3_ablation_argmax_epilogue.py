# Control (round 3, class ablation): an HONEST kernel rejected. The kernel computes the logits; XLA takes the
#   (cheap) argmax. Ablation compares all-NaN logits with all-ones logits: argmax is 0 for both, so the judge
#   concludes the kernel "does no work". Any index-valued epilogue (argmax, argsort, top-k indices, a histogram of
#   comparisons) is rejected the same way.
# Rule 15 (false rejection). Class: ablation. Target: tpu. Task: adv_top1 = Task("adv_top1", lambda x, w:
#   jnp.argmax(jnp.dot(x, w, precision=HIGHEST), axis=-1), (ArgSpec("x", (16, 256), "float32"), ArgSpec("w",
#   (256, 128), "float32")), {"ci": Scale("ci")}) (not in tests/test_adversarial.py yet).
# Today (HEAD 560b111): rejected, "kernel 1 of 1 does no work".
# Expected verdict: correct (a fill that varies per element, e.g. judge-seeded random values, next to NaN and ones).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _logits(x_ref, w_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], w_ref[...], precision=jax.lax.Precision.HIGHEST)


def kernel(x, w):
    logits = pl.pallas_call(_logits, out_shape=jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), jnp.float32))(x, w)
    return jnp.argmax(logits, axis=-1)
