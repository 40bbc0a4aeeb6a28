"""17p_Triangle_Multiplication.

AlphaFold2 outgoing triangle multiplicative update (simplified: RMS centre norm, no input LayerNorm).
Source: AlphaFold2 triangle multiplication (JaxBench production task). mk's own implementation,
written from the published task facts; the full semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "Simplified outgoing triangle multiplication. pair_act is (N=1536,N,C=128) bf16 and all weights are "
    "(C_in,C_out) bf16, applied as act @ W (jnp.dot, bf16 result). act = pair_act * mask (mask is all "
    "ones, shape (N,N,1)). L = (act@left_proj_w) * sigmoid(act@left_gate_w); R = (act@right_proj_w) * "
    "sigmoid(act@right_gate_w), all bf16. t[i,j,c] = sum_k L[i,k,c]*R[j,k,c] (einsum 'ikc,jkc->ijc', bf16"
    " result): per channel this is an NxN matrix product L_c @ R_c^T with contraction over 1536. rms = "
    "sqrt(bf16(mean_c(t*t)) + bf16(1e-6)), where t*t is bf16, the mean accumulates in f32 and is divided "
    "by 128 before the cast to bf16, and the +eps (about 9.98e-7) and sqrt are in bf16. t = t / rms * "
    "center_scale (bf16, left to right). o = t @ out_proj_w. gate = sigmoid(pair_act @ out_gate_w), which"
    " uses the original pair_act rather than act. out = o * gate. Output (1536,1536,128) bf16. There is "
    "no input LayerNorm and no mean-centering (the 'center' norm is an RMS norm with scale only and no "
    "bias)."
)

GFLOP = 1397.0
MIN_BYTES = 1212875008


def triangle_multiplication(pair_act, mask, left_proj_w, right_proj_w, left_gate_w, right_gate_w,
                            center_scale, out_proj_w, out_gate_w):
    """pair_act (N,N,C) bf16, mask (N,N,1) bf16, weights (C,C) bf16, center_scale (C,) -> (N,N,C) bf16."""
    act = pair_act * mask
    left = jnp.dot(act, left_proj_w) * jax.nn.sigmoid(jnp.dot(act, left_gate_w))
    right = jnp.dot(act, right_proj_w) * jax.nn.sigmoid(jnp.dot(act, right_gate_w))
    t = jnp.einsum("ikc,jkc->ijc", left, right)
    rms = jnp.sqrt(jnp.mean(t * t, axis=-1, keepdims=True) + 1e-6)
    t = t / rms * center_scale
    o = jnp.dot(t, out_proj_w)
    gate = jax.nn.sigmoid(jnp.dot(pair_act, out_gate_w))  # the original pair_act, not act
    return o * gate


TASK = Task(
    name="17p_Triangle_Multiplication",
    reference=triangle_multiplication,
    args=(
        ArgSpec("pair_act", ("N", "N", "C"), "bfloat16", Init("normal")),
        ArgSpec("mask", ("N", "N", 1), "bfloat16", Init("ones")),
        ArgSpec("left_proj_w", ("C", "C"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("right_proj_w", ("C", "C"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("left_gate_w", ("C", "C"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("right_gate_w", ("C", "C"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("center_scale", ("C",), "bfloat16", Init("normal", mean=1.0, std=0.1)),
        ArgSpec("out_proj_w", ("C", "C"), "bfloat16", Init("normal", std=0.02)),
        ArgSpec("out_gate_w", ("C", "C"), "bfloat16", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"N": 1536, "C": 128}),
        "ci": Scale("ci", dims={"N": 48, "C": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
