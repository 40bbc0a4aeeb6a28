# Rule 15 (round 3, class nowork): FLOPs outside kernels = flops(ablated, keep_operands) - operand_elements. The
#   subtraction credits one FLOP per element of every float kernel RESULT, but the ablated program only adds that
#   `add` when the kernel has a float OPERAND (no float operand, no sink, no add). A kernel whose only operand is
#   an int32 bitcast of x and whose float output is 8x the answer's size (zeros) earns 8N FLOPs of credit: the
#   whole reference (4N) plus the final add (N), computed by XLA, nets to 0.
# Class: nowork (FLOP credit). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): correct (outside share 0%).
# Expected verdict: rejected, reason contains "FLOPs run outside the kernels" (subtract exactly what the sink
#   added: result elements only when a sink exists, or count the sink's ops by tagging them).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _zeros(seed_ref, o_ref):
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)


def kernel(x, y):
    answer = jnp.tanh(x) * y + 0.5 * x  # all of the work, in XLA
    seed = jax.lax.bitcast_convert_type(x, jnp.int32)  # the kernel's only operand is an integer
    pad = pl.pallas_call(_zeros, out_shape=jax.ShapeDtypeStruct((8 * x.shape[0], x.shape[1]), jnp.float32))(seed)
    return answer + pad[: x.shape[0]]
