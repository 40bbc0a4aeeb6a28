# Rule 15 (round 3, class nowork): the matmul done by XLA as a 0-d convolution. program.flops costs a convolution
#   as 2 * out * |rhs| / rhs.shape[-1], i.e. it assumes the kernel's LAST dimension is the output-feature one; with
#   the "OI" layout the last dimension is the contraction (256) and the count is O/I = 16/256 of the truth:
#   6.6e4 of the reference's 1.05e6 FLOPs (6%, not even flagged). The same formula over-counts a reference conv
#   written "DHWOI" (28k_ConvTranspose3d: 2204 GFLOP counted for 1004 written).
# Class: nowork (FLOPs hidden from the counter). Target: tpu. Task: adv_matmul.
# Today (HEAD 560b111): correct (no flag).
# Expected verdict: rejected, reason contains "FLOPs run outside the kernels" (cost a convolution from its
#   dimension_numbers: 2 * out * |rhs| / rhs[kernel_output_feature_dimension], adjusted for group counts).
import jax
from jax.experimental import pallas as pl


def _copy(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def kernel(x, y):
    # (x @ y).T: lhs (batch=n, feature=k), rhs (O=m, I=k), I last
    t = jax.lax.conv_general_dilated(y.T, x, (), (), dimension_numbers=("NC", "OI", "NC"),
                                     precision=jax.lax.Precision.HIGHEST).T
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(t.shape, t.dtype))(t)
