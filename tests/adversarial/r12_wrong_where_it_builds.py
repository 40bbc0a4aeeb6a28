# Round 12 (issue 22, item 5): the control's kernel without its check: it builds at every size, and where the block
# does not divide the rows (the held-out 384) its grid of rows // 256 steps leaves the last rows unwritten. A kernel
# that gives wrong numbers at a size it accepts stays incorrect: being buildable only where it is right is what
# narrows a verdict, not being wrong.
# Rule: 5, 10. Expected verdict: incorrect.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y, *, block_rows: int = 256):
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // block_rows,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
