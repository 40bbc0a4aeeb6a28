"""38k_Matmul_Dropout_Softmax.

softmax(x @ W^T + b); dropout omitted (inference).
Source: KernelBench Level-2 #66 Matmul_Dropout_Softmax (dropout_p=0.2 in CONFIG) (JaxBench).
mk's own implementation, written from the published task facts; the full
semantics are in ``DESCRIPTION``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mk.task import ArgSpec, Init, Scale, Task, Tolerance

DESCRIPTION = (
    "h = x @ W^T + b, with W (out,in) = (8192,8192) used transposed and default matmul precision, f32 "
    "in/out. Dropout is OMITTED entirely, i.e. inference identity with no 1/(1-p) rescale, even though "
    "CONFIG lists dropout_p=0.2. out = softmax(h, axis=1) = exp(h - rowmax)/rowsum, in f32. Output "
    "(4096,8192) f32. mk note: dropout_p=0.2 is not an argument at all; the dropout step is the identity."
)

#: Published cost facts at the full scale: GFLOP of the reference as written, minimum bytes moved.
GFLOP = 549.9
MIN_BYTES = 536903680


def matmul_dropout_softmax(x, weight, bias):
    h = jnp.dot(x, weight.T) + bias
    # Dropout (p=0.2 in the original CONFIG) is omitted: inference identity, no rescale.
    return jax.nn.softmax(h, axis=1)


TASK = Task(
    name="38k_Matmul_Dropout_Softmax",
    reference=matmul_dropout_softmax,
    args=(
        ArgSpec("x", ("B", "K"), "float32", Init("uniform", low=0.0, high=1.0)),
        ArgSpec("weight", ("N", "K"), "float32", Init("normal", std=0.02)),
        ArgSpec("bias", ("N",), "float32", Init("normal", std=0.02)),
    ),
    static=(),
    tolerance=Tolerance(atol=0.01, rtol=0.01),
    scales={
        "full": Scale("full", dims={"B": 4096, "K": 8192, "N": 8192}),
        "ci": Scale("ci", dims={"B": 16, "K": 8192, "N": 128}),
    },
    description=DESCRIPTION,
    kind="builtin",
    default_scale="full",
)
