# Rule 11: a precision shortcut, bf16 operands against an fp32 HIGHEST-precision reference with a
# tight tolerance. Task: adv_matmul (atol=rtol=1e-4), target cpu.
# Expected verdict: incorrect, reason reports the max abs error.
import jax.numpy as jnp


def kernel(x, y):
    return jnp.dot(x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
