# Round 12 control (issue 22, item 5): an honest kernel whose 256-row block must divide the rows, as upstream kernels
# assert their block sizes. The task's rows (256) divide; the held-out scale (384) and most fresh sizes do not, and
# the kernel raises while tracing there. Judged correct at the sizes it can be built at, with a flag naming each size
# it cannot, and an envelope of exactly the sizes judged.
# Rule: 5 (no legitimate kernel refused). Expected verdict: correct.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.tanh(x) * y_ref[...] + 0.5 * x


def kernel(x, y, *, block_rows: int = 256):
    rows, cols = x.shape
    if rows % block_rows:
        raise ValueError(f"rows ({rows}) must be a multiple of the {block_rows}-row block")
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_body, grid=(rows // block_rows,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
