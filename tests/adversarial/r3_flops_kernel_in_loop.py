# Control (round 3, class flops): an HONEST kernel rejected. The kernel is called once per 8-row chunk inside a
#   fori_loop (the pattern of layer loops, expert loops, paged attention). The FLOPs-outside variant keeps each
#   kernel's operands alive with a sink (x*0 summed, per operand element) that runs every iteration, so
#   program.flops counts it x trip count, but operand_elements() subtracts it once (a static count over the
#   module). XLA does no arithmetic here (slices and updates only), yet 63% of the reference "runs outside".
# Rule 15 (false rejection). Class: flops. Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): rejected, "63% of the reference's FLOPs run outside the kernels".
# Expected verdict: correct (do not subtract an estimate: mark the sink's ops, e.g. with a location or attribute,
#   and have flops() skip them, so loops multiply them consistently).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ROWS = 8


def _mix(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    mix = pl.pallas_call(_mix, out_shape=jax.ShapeDtypeStruct((ROWS, x.shape[1]), x.dtype))

    def body(i, out):  # one kernel call per 8-row chunk, in a loop (an honest pattern: layers, experts, pages)
        xs = jax.lax.dynamic_slice_in_dim(x, i * ROWS, ROWS)
        ys = jax.lax.dynamic_slice_in_dim(y, i * ROWS, ROWS)
        return jax.lax.dynamic_update_slice_in_dim(out, mix(xs, ys), i * ROWS, 0)

    return jax.lax.fori_loop(0, x.shape[0] // ROWS, body, jnp.zeros_like(x))
