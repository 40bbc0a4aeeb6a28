# Rule 5/18 (round 3, class semantics): an out-of-bounds in-kernel slice that the HLO interpreter clamps. The
#   kernel walks the rows in chunks of 16 with pl.ds(c * 16, 16); at scale wide (24 rows) the last chunk starts at
#   row 16 and runs to 32. Pallas's HLO interpreter lowers ref slicing to dynamic_slice / dynamic_update_slice,
#   which CLAMP the start to 8, so it recomputes rows 8..23 and the result is right; on a TPU the access is out of
#   bounds. The judge's own TPU interpreter (target.interpret_params(), used today only for DMA kernels) raises
#   "IndexError: Out-of-bounds read ... reading [16:32] but buffer has shape (24, 128)".
# Class: semantics (interpreter vs Mosaic). Target: tpu. Task: adv_tanh_mix.
# Today (HEAD 560b111): correct (verified_by cpu).
# Expected verdict: rejected or incorrect, reason contains "Out-of-bounds" (_check_races: run one case per scale in
#   the TPU interpreter for EVERY tpu kernel, not only DMA ones; its OOB and revisit checks then apply).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

CHUNK = 16


def _mix(x_ref, y_ref, o_ref):
    def body(c, carry):
        rows = pl.ds(c * CHUNK, CHUNK)  # the last chunk runs past the end when rows % 16 != 0
        x = x_ref[rows, :]
        o_ref[rows, :] = jnp.tanh(x) * y_ref[rows, :] + 0.5 * x
        return carry

    jax.lax.fori_loop(0, pl.cdiv(x_ref.shape[0], CHUNK), body, 0)


def kernel(x, y):
    return pl.pallas_call(_mix, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
