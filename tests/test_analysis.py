import jax
import jax.numpy as jnp
import pytest

from mk.analysis import TaskAnalysis, analyze, cost_analysis
from mk.task import ArgSpec, Scale, Task


def _matmul_task():
    def matmul(a, b):
        return a @ b

    return Task(
        "matmul",
        matmul,
        (ArgSpec("a", ("M", "K"), "float32"), ArgSpec("b", ("K", "N"), "float32")),
        {"ci": Scale("ci", {"M": 64, "K": 32, "N": 48}), "full": Scale("full", {"M": 4096, "K": 4096, "N": 4096})},
    )


def test_matmul_flops_bytes_and_floor():
    task = _matmul_task()
    a = analyze(task, "ci")
    assert isinstance(a, TaskAnalysis)
    assert a.flops == 2 * 64 * 48 * 32
    assert a.primitive_counts == {"dot_general": 1}
    assert a.input_bytes == (64 * 32 + 32 * 48) * 4 and a.output_bytes == 64 * 48 * 4
    assert a.min_bytes == a.input_bytes + a.output_bytes
    assert a.arithmetic_intensity == pytest.approx(a.flops / a.min_bytes)
    assert a.xla_cost is not None and a.xla_cost.flops == pytest.approx(a.flops, rel=0.05)
    (op,) = a.main_ops()
    assert op.category == "matmul" and op.in_shapes == ["f32[64,32]", "f32[32,48]"] and op.out_shapes == ["f32[64,48]"]
    assert set(a.floors) == {"v6e", "h200"}
    full = analyze(task, "full", xla=False, specs=("v6e", "h200", "v7x"))
    assert full.flops == 2 * 4096**3 and full.xla_cost is None
    assert full.arithmetic_intensity > 918e12 / 1.638e12  # above v6e's ridge point
    assert full.floors["v6e"].bound == "compute" and full.floors["v6e"].dtype == "bfloat16"
    assert full.floors["h200"].dtype == "tfloat32"  # float32 matmuls run as TF32 under DEFAULT precision
    assert full.floors["v6e"].seconds == pytest.approx(full.flops / 918e12)
    text = full.summary()
    assert "matmul" in text and "dot_general(f32[4096,4096], f32[4096,4096])" in text and "v7x" in text


def test_rmsnorm_is_memory_bound_on_v6e():
    def rmsnorm(x, w, eps):
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
        return (y * w).astype(x.dtype)

    task = Task(
        "rmsnorm",
        rmsnorm,
        (ArgSpec("x", ("B", "D"), "bfloat16"), ArgSpec("w", ("D",), "float32")),
        {"full": Scale("full", {"B": 4096, "D": 4096}), "ci": Scale("ci", {"B": 8, "D": 128})},
        static=(__import__("mk.task", fromlist=["StaticArg"]).StaticArg("eps", 1e-6),),
    )
    a = analyze(task, "full", xla=False)
    assert a.floors["v6e"].bound == "memory" and a.floors["h200"].bound == "memory"
    assert a.min_bytes == 4096 * 4096 * 2 * 2 + 4096 * 4
    assert a.floors["v6e"].seconds == pytest.approx(a.min_bytes / 1.638e12)
    assert a.transcendentals == 4096  # one rsqrt per row
    cats = {o.category for o in a.main_ops()}
    assert {"reduction", "transcendental"} <= cats
    assert "memory-bound" in a.summary()
    ci = analyze(task, "ci")
    assert ci.scale == "ci" and ci.xla_cost is not None


def test_scan_body_counts_per_iteration_and_subjaxprs_are_walked():
    def recurrent(xs, w):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h

        return jax.lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs)

    task = Task("rnn", recurrent, (ArgSpec("xs", (6, 4, 16), "float32"), ArgSpec("w", (16, 16), "float32")), {"ci": Scale("ci")})
    a = analyze(task, xla=False)
    assert a.primitive_counts["scan"] == 1 and a.primitive_counts["dot_general"] == 1
    matmul = 6 * 2 * 4 * 16 * 16
    assert a.flops == matmul + 6 * 4 * 16  # the add
    assert a.transcendentals == 6 * 4 * 16
    assert a.outputs == ["f32[4,16]", "f32[6,4,16]"]


def test_cond_counts_the_costliest_branch_and_while_is_noted():
    def f(x, w):
        y = jax.lax.cond(x.sum() > 0, lambda: x @ w, lambda: x * 2.0)
        n = jax.lax.while_loop(lambda i: i < 3, lambda i: i + 1, 0)
        return y + n

    task = Task("branchy", f, (ArgSpec("x", (8, 8), "float32"), ArgSpec("w", (8, 8), "float32")), {"ci": Scale("ci")})
    a = analyze(task, xla=False)
    assert a.primitive_counts["dot_general"] == 1 and a.primitive_counts["mul"] >= 1
    assert a.flops >= 2 * 8 * 8 * 8
    assert any("while" in n for n in a.notes)


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_conv_flops(padding):
    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))

    task = Task("conv", conv, (ArgSpec("x", (2, 8, 8, 4), "float32"), ArgSpec("k", (3, 3, 4, 6), "float32")), {"ci": Scale("ci")})
    a = analyze(task)
    side = 6 if padding == "VALID" else 8
    # mk counts every output's full window (padding included), XLA skips the padded taps
    assert a.flops == 2 * (2 * side * side * 6) * (3 * 3 * 4)
    if padding == "VALID":
        assert a.xla_cost.flops == pytest.approx(a.flops, rel=0.05)
    else:
        assert a.xla_cost.flops < a.flops


def test_cost_analysis_returns_flops_and_bytes():
    cost = cost_analysis(lambda a, b: a @ b, jax.ShapeDtypeStruct((16, 8), jnp.float32), jax.ShapeDtypeStruct((8, 4), jnp.float32))
    assert cost.flops == 2 * 16 * 8 * 4 and cost.bytes >= (16 * 8 + 8 * 4 + 16 * 4) * 4
