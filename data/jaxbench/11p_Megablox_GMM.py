"""11p_Megablox_GMM.

Grouped matmul (megablox GMM): consecutive row groups of lhs times their own rhs[g], via a lax.scan.
Source: Qwen3-235B-A22B MoE grouped matmul (JaxBench production task). mk's own implementation,
written from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance

DESCRIPTION = (
    "Grouped matmul. lhs is (M=32768 = 4096 tokens x top-8, K=4096) bf16, rhs is (G=128, K, N=1536) bf16 "
    "and group_sizes is int32[128]. Rows are partitioned into consecutive groups: start_g = exclusive "
    "cumsum of group_sizes. A lax.scan over g=0..127 does the following. Take a fixed-size slab of "
    "max_expert_size=256 rows from lhs at start_g. This is a dynamic_slice, so the start is clamped to "
    "keep the slab in bounds. Compute dot(slab, rhs[g]) with preferred_element_type=float32. Zero the "
    "rows r >= group_sizes[g]. Cast to bf16 and add into a bf16 accumulator of shape (M+256, N) at rows "
    "start_g..start_g+255, read-modify-write. The output is the first M rows, (32768,1536) bf16. With the"
    " given inputs every group size is 256, so the result is exactly out[256g:256g+256] = "
    "bf16(f32-accumulated lhs[256g:256g+256] @ rhs[g]), i.e. a uniform block-diagonal batched GEMM. "
    "Quirks: the semantics for group sizes > 256 would silently drop rows, and for groups near the end "
    "the lhs slab start would be clamped. max_expert_size sets the dynamic_slice sizes, so it must be "
    "static. XLA cost analysis counts the scan body only once (3.2 GFLOP); the true count is 2*M*K*N = "
    "412 GFLOP, which is the gflop value used here. mk note: the ci scale is M=512, K=128, G=8, N=128 "
    "with max_expert_size=64 and every group of 64 rows. mk note: with the default ('native') inputs "
    "every array, floats included, comes from the task's generator `make_inputs(scale)`, which draws the "
    "published distributions and structure with numpy (seed 42; not the published jax.random values) at "
    "that scale, so the seed does not change them; other input distributions redraw the floats only."
)

GFLOP = 412.3
MIN_BYTES = 1979712000


def megablox_gmm(lhs, rhs, group_sizes, max_expert_size):
    """lhs (M,K) bf16, rhs (G,K,N) bf16, group_sizes (G,) int32 -> (M,N) bf16."""
    m, k = lhs.shape
    n = rhs.shape[2]
    starts = jnp.cumsum(group_sizes) - group_sizes  # exclusive cumsum
    rows = jnp.arange(max_expert_size)[:, None]

    def body(acc, xs):
        w, size, start = xs
        slab = jax.lax.dynamic_slice(lhs, (start, 0), (max_expert_size, k))  # start clamped in bounds
        part = jnp.dot(slab, w, preferred_element_type=jnp.float32)
        part = jnp.where(rows < size, part, 0.0).astype(jnp.bfloat16)
        cur = jax.lax.dynamic_slice(acc, (start, 0), (max_expert_size, n))
        return jax.lax.dynamic_update_slice(acc, cur + part, (start, 0)), None

    acc = jnp.zeros((m + max_expert_size, n), jnp.bfloat16)
    acc, _ = jax.lax.scan(body, acc, (rhs, group_sizes, starts))
    return acc[:m]


_SIZES = {"full": (32768, 4096, 128, 1536, 256), "ci": (512, 128, 8, 128, 64)}  # M, K, G, N, max_expert_size


def make_inputs(scale):
    """The published layout: N(0,1) lhs, N(0,0.02) rhs, every group M // G rows (numpy, seed 42)."""
    m, k, g, n, mes = _SIZES[scale]
    rng = np.random.default_rng(42)
    bf16 = np.dtype(jnp.bfloat16)
    lhs = rng.standard_normal((m, k), np.float32).astype(bf16)
    rhs = (rng.standard_normal((g, k, n), np.float32) * 0.02).astype(bf16)
    group_sizes = np.full((g,), m // g, np.int32)
    return [lhs, rhs, group_sizes], [mes]


def _dims(scale):
    m, k, g, n, _ = _SIZES[scale]
    return {"M": m, "K": k, "G": g, "N": n}


TASK = Task(
    name="11p_Megablox_GMM",
    reference=megablox_gmm,
    args=(
        ArgSpec("lhs", ("M", "K"), "bfloat16", Init("normal")),
        ArgSpec("rhs", ("G", "K", "N"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("group_sizes", ("G",), "int32", Init("native")),
    ),
    static=(StaticArg("max_expert_size", 256),),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims=_dims("full")),
        "ci": Scale("ci", dims=_dims("ci"), static={"max_expert_size": 64}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
    native_inputs=make_inputs,
)
