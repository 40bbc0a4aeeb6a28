# Rule 15 / 5 (round 2, class nowork): the kernel writes only output block 0 and jnp fills the rest. The output
#   aliases an input that jnp already filled with the whole answer (`input_output_aliases`); every grid step's
#   out block is block 0, so block 1 is never written and keeps jnp's values (no NaN poison reaches it: it never
#   passes through VMEM). Ablation changes the output (the kernel's block 0 becomes NaN); the FLOP count catches it.
# Class: nowork (half the work, rest prefilled). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD f7ab8eb): correct.
# Expected verdict: rejected, reason contains "outside the kernel" (reference FLOPs counted outside kernels).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _first_block(x_ref, y_ref, prefilled_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y):
    prefilled = jnp.tanh(x) * y + 0.5 * x
    block0 = pl.BlockSpec((8, x.shape[1]), lambda i: (0, 0))  # every step maps to block 0
    return pl.pallas_call(
        _first_block, grid=(x.shape[0] // 8,),
        in_specs=[block0, block0, pl.BlockSpec(memory_space=pl.ANY)], out_specs=block0,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), input_output_aliases={2: 0},
    )(x, y, prefilled)
