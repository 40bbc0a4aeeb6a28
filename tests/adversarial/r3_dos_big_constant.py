# Rule 9 (round 3, class dos): an honest kernel with 128 MiB of incompressible constant baked into the exported
#   programs (an unused kernel operand). The trusted judge, which has no memory limit, reads each export
#   (_read_regular up to 2 GiB), copies it, deserializes it, prints it as MLIR TEXT (constants in hex) and parses
#   that again (program.custom_calls): ~12x the constant per program. Measured with 256 MiB: judge peak RSS 3.0 GB
#   (vs 0.19 GB for a control), 74 s; a 1.9 GiB constant (under the 2 GiB read cap, inside the tracer's 11.7 GB
#   limit) needs ~23 GB in the judge. The runner is hit the same way (see r3_poison_runner_memory.py).
# Class: dos (judge memory). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): correct, judge peak RSS ~1.6 GB.
# Expected verdict: rejected, reason contains "too large" (cap exported programs at e.g. 64 MiB in _read_regular;
#   read custom calls from the bytecode, `ir.Module.parse(exported.mlir_module_serialized)`, never the text; do
#   the MLIR analysis in the memory-limited runner).
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

_BLOB = np.random.default_rng(0).standard_normal(32 << 20).astype(np.float32)


def _mix(x_ref, y_ref, b_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    blob = jnp.asarray(_BLOB)[: x.size].reshape(x.shape)
    return pl.pallas_call(_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y, blob)
