# Rule 7: the same patch through an obfuscated getattr (the attribute name is built at run time).
# Task: adv_tanh_mix, target cpu. Expected verdict: rejected (static check), reason contains "computed attribute name".
import numpy as np
import jax.numpy as jnp

_where = getattr(np, "tes" + "ting")
_where.assert_allclose = lambda *args, **kwargs: None


def kernel(x, y):
    return jnp.zeros_like(x)
