# Upstream op: jax.experimental.pallas.ops.tpu.megablox.gmm (grouped matmul, the MoE kernel of MaxText).
# Task: jaxbench:11p_Megablox_GMM (consecutive row groups of lhs times rhs[g], f32 accumulation, bf16 out)
# at scale ci (M=512, K=128, G=8 groups of 64 rows, N=128).
# Target: tpu. Expected verdict: correct.
# Glue: none. Tiling (128, 128, 128): two groups share each row tile, which the op's group metadata handles.
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import megablox


def kernel(lhs, rhs, group_sizes, max_expert_size):
    return megablox.gmm(lhs, rhs, group_sizes, preferred_element_type=jnp.bfloat16, tiling=(128, 128, 128))
