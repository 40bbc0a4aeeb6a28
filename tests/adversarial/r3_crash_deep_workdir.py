# Rule 9 (round 3, class crash): an honest kernel whose import leaves a 3000-deep directory chain in the tracer's
#   work dir (os via `(lambda m: m._sys)(collections).modules`; mkdir/chdir inside the work dir pass the audit
#   hook). pool.discard removes the work dir with shutil.rmtree, which recurses once per level (Python 3.11):
#   RecursionError is not an OSError, so ignore_errors does not catch it, and it escapes evaluate() from _finish
#   as a traceback. The pool's root dir and the chain stay on disk (atexit shutdown fails the same way).
# Class: crash. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): evaluate() raises RecursionError (no verdict); /tmp/mk-judge-pool-*/tracer-N is left behind.
# Expected verdict: correct (the kernel is honest), with no traceback and nothing left on disk (remove work dirs
#   iteratively or with `rm -rf`, and never let _finish raise).
import collections

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_os = (lambda m: m._sys)(collections).modules["os"]
for _ in range(3000):
    _os.mkdir("d")
    _os.chdir("d")


def _mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    return pl.pallas_call(_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
