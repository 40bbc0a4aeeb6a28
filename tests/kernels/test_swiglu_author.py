"""The offline author's gated-MLP recogniser: 9p is bound to mk.kernels.swiglu in a standalone file that passes the
static check and matches the reference at other sizes; non-elementwise gates and other products are declined."""

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import pytest

from mk.author import swiglu
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.task import ArgSpec, Init, Scale, Task, Tolerance
from mk.targets import get_target


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_written_kernel_is_standalone_and_general(target):
    task = load_task("jaxbench:9p_SwiGLU_MLP")
    ci = task.scale("ci")
    task = task.with_scales({"ci": ci})
    prop = swiglu.propose(task, trace_scales(task), target)
    assert prop.template == "swiglu" and "from mk" not in prop.source and f"def swiglu_{target}(" in prop.source
    assert "jax.nn.sigmoid(g)" in prop.source  # the gate is the reference's own code
    assert check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    other = task.with_scales({"ci": dataclasses.replace(ci, dims={**ci.dims, "S": 24, "M": 640})})
    xs = other.make_inputs("ci", 1, "normal")
    want = np.asarray(other.bind(other.reference, "ci")(*xs), np.float32)
    with get_target(target).execution():
        got = np.asarray(jax.jit(other.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
    np.testing.assert_allclose(got, want, atol=0.1, rtol=0.1)


def _mlp(gate):
    def ref(x, w1, w2, w3):
        return jnp.dot(gate(jnp.dot(x, w1), jnp.dot(x, w2)), w3)

    args = (ArgSpec("x", ("M", "E"), "float32", Init("normal")), ArgSpec("w1", ("E", "F"), "float32", Init("normal")),
            ArgSpec("w2", ("E", "F"), "float32", Init("normal")), ArgSpec("w3", ("F", "E"), "float32", Init("normal")))
    return Task(name="mlp", reference=ref, args=args, static=(), tolerance=Tolerance(atol=1e-3, rtol=1e-3),
                scales={"ci": Scale("ci", dims={"M": 16, "E": 128, "F": 256})}, default_scale="ci")


def test_declines_a_gate_that_is_not_elementwise():
    task = _mlp(lambda g, u: jax.nn.softmax(g, axis=-1) * u)  # a softmax over the hidden axis sees every block
    with pytest.raises(Unsupported, match="not elementwise"):
        swiglu.propose(task, trace_scales(task), "tpu")
    gemm = load_task("jaxbench:8p_GEMM")
    with pytest.raises(Unsupported, match="three matrix products"):
        swiglu.propose(gemm, trace_scales(gemm.with_scales({"ci": gemm.scale("ci")})), "tpu")


# --- the other MLPs models write (issue 25 item 1): ungated, a fused gate-up weight, weights kept as (out, in) ------

def _written_and_run(fn, shapes, name, target, sizes, tol, seed, big_inputs=1):
    """The MLP recogniser's kernel for ``fn`` at ``shapes``: standalone, statically checked, and matching ``fn`` (on
    float32 copies) within ``tol`` at each of ``sizes`` (lists of (shape, dtype)), in interpret mode. The first
    ``big_inputs`` inputs are drawn at unit scale, the weights at 0.05."""
    from mk.loaders.callable import task_from_callable

    task = task_from_callable(fn, scales={"ci": shapes}, name=name)
    prop = swiglu.propose(task, trace_scales(task), target)
    assert "from mk" not in prop.source and check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)  # noqa: S102 - the written kernel under test
    rng = np.random.default_rng(seed)
    for dims in sizes:
        xs = [jnp.asarray(rng.normal(size=s) * (1 if i < big_inputs else 0.05), d) for i, (s, d) in enumerate(dims)]
        want = np.asarray(jax.jit(fn)(*[x.astype(jnp.float32) for x in xs]), np.float32)
        with get_target(target).execution():
            got = np.asarray(jax.jit(ns["kernel"])(*xs), np.float32)
        np.testing.assert_allclose(got, want, atol=tol, rtol=tol, err_msg=f"{name} at {dims}")
    return prop, ns


def _squared_relu(x, up, down):
    return jnp.square(jax.nn.relu(x @ up)) @ down


def _gelu_tanh_out_in(x, up, down):  # a PyTorch port: nn.Linear weights (out, in)
    return jax.nn.gelu(jnp.einsum("bsd,fd->bsf", x, up), approximate=True) @ down.T


def _phi3(x, gate_up, down):  # one (out, in) gate-up weight chunked in two, gate first
    gate, up = jnp.split(x @ gate_up.T, 2, axis=-1)
    return (up * jax.nn.silu(gate)) @ down.T


def _sliced_up_first(x, w, down):  # the halves taken by slicing, the up half first
    h = x @ w
    f = h.shape[-1] // 2
    return (h[..., :f] * jax.nn.gelu(h[..., f:])) @ down


_F32, _BF16 = "float32", "bfloat16"
MLPS = {
    "squared_relu": (_squared_relu, [((2, 24, 128), _BF16), ((128, 256), _BF16), ((256, 128), _BF16)], "_g"),
    "gelu_out_in": (_gelu_tanh_out_in, [((2, 16, 128), _F32), ((384, 128), _F32), ((96, 384), _F32)], "_g"),
    "phi3": (_phi3, [((32, 128), _BF16), ((512, 128), _BF16), ((128, 256), _BF16)], "_g, _u"),
    "sliced_up_first": (_sliced_up_first, [((40, 128), _F32), ((128, 512), _F32), ((256, 64), _F32)], "_g, _u"),
}


def _grown(shapes):
    """The same MLP at other sizes: more rows, hidden units and output columns (the weights' (in) axis fixed)."""
    return [tuple(2 * n if n not in (128,) else n for n in s) for s, _ in shapes]


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("name", sorted(MLPS))
def test_other_mlps_are_written_and_run_at_other_sizes(name, target):
    fn, shapes, args = MLPS[name]
    grown = list(zip(_grown(shapes), [d for _, d in shapes]))
    prop, _ = _written_and_run(fn, shapes, name, target, (shapes, grown), 3e-2 if shapes[0][1] == _BF16 else 1e-4, 0)
    assert f"def _gate({args}):" in prop.source


def test_a_fused_product_cut_other_than_in_halves_is_declined():
    from mk.loaders.callable import task_from_callable

    def thirds(x, w, down):
        a, b, c = jnp.split(x @ w, 3, axis=-1)
        return (a * b * c) @ down

    task = task_from_callable(thirds, scales={"ci": [((16, 128), _F32), ((128, 384), _F32), ((128, 64), _F32)]})
    with pytest.raises(Unsupported, match="not two halves"):
        swiglu.propose(task, trace_scales(task), "tpu")


# --- biases and what follows the down-projection (Flax Dense, GPT-2, ViT, BERT): issue 25 item 1 ---------------------

def _gpt2_mlp(x, w_fc, b_fc, w_proj, b_proj):
    return jax.nn.gelu(x @ w_fc + b_fc, approximate=True) @ w_proj + b_proj


def _residual_block(x, w1, b1, w2, b2):  # x + MLP(x), in bf16 with the product rounded as the reference does
    return (x + (jax.nn.relu(x @ w1 + b1) @ w2 + b2)).astype(jnp.bfloat16)


def _gated_bias_out_in(x, wg, bg, wu, wd, bd):  # (out, in) weights, a bias on the gate only, (1, D) output bias
    g = x @ wg.T + bg
    return (jax.nn.silu(g) * (x @ wu.T)) @ wd.T + bd


BIASED = {
    "gpt2_mlp": (_gpt2_mlp, [((2, 24, 128), _F32), ((128, 512), _F32), ((512,), _F32), ((512, 128), _F32),
                             ((128,), _F32)], "_g, b_fc"),
    "residual_block": (_residual_block, [((40, 128), _BF16), ((128, 256), _BF16), ((256,), _BF16),
                                         ((256, 128), _BF16), ((128,), _BF16)], "_g, b1"),
    "gated_bias_out_in": (_gated_bias_out_in, [((32, 128), _F32), ((256, 128), _F32), ((1, 256), _F32),
                                               ((256, 128), _F32), ((64, 256), _F32), ((1, 64), _F32)], "_g, _u, bg"),
}


def _grown_biased(name, shapes):
    """Other sizes: twice the rows and hidden units (every axis of F), the model width kept."""
    f = {"gpt2_mlp": 512, "residual_block": 256, "gated_bias_out_in": 256}[name]
    return [(tuple(2 * n if (n == f or k == 0 and i == 0) else n for k, n in enumerate(s)), d)
            for i, (s, d) in enumerate(shapes)]


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("name", sorted(BIASED))
def test_biases_and_the_epilogue_are_fused(name, target):
    fn, shapes, args = BIASED[name]
    sizes = (shapes, _grown_biased(name, shapes))
    prop, _ = _written_and_run(fn, shapes, name, target, sizes, 5e-2 if shapes[0][1] == _BF16 else 1e-4, 1)
    assert f"def _gate({args}):" in prop.source and "def _epilogue(_y, " in prop.source


def test_what_follows_the_down_projection_must_be_elementwise():
    from mk.loaders.callable import task_from_callable

    def post_norm(x, w1, w2):
        y = jax.nn.relu(x @ w1) @ w2
        return y / jnp.linalg.norm(y, axis=-1, keepdims=True)

    task = task_from_callable(post_norm, scales={"ci": [((16, 128), _F32), ((128, 256), _F32), ((256, 128), _F32)]})
    with pytest.raises(Unsupported, match="after the down-projection is not elementwise"):
        swiglu.propose(task, trace_scales(task), "gpu")


def test_the_triton_activation_rounds_each_bf16_step_as_the_reference_does():
    """Set 3's LLaMA MLP (bf16, unit-variance weights, an output that cancels to small sums) was outside the judge's
    bf16 tolerance on gpu at fresh seeds: the Triton kernel ran the activation in float32 unrounded. Each 16-bit step
    is now rounded; the written kernel passes the judge's rule for a bf16 reference at three seeds."""
    from mk.loaders.callable import task_from_callable

    def llama(x, wg, wu, wd):
        return (jax.nn.silu(x @ wg.T) * (x @ wu.T)) @ wd.T

    shapes = [((2, 104, 512), _BF16), ((1376, 512), _BF16), ((1376, 512), _BF16), ((512, 1376), _BF16)]
    task = task_from_callable(llama, scales={"ci": shapes}, name="llama")
    prop = swiglu.propose(task, trace_scales(task), "gpu")
    assert ".astype(jnp.bfloat16).astype(jnp.float32)" in prop.source
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)  # noqa: S102 - the written kernel under test
    from mk.harness.compare import compare_fair
    from mk.task import Tolerance

    passed = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        xs = [jnp.asarray(rng.normal(size=s), jnp.bfloat16) for s, _ in shapes]
        want = np.asarray(jax.jit(llama)(*xs))
        want32 = np.asarray(jax.jit(llama)(*[x.astype(jnp.float32) for x in xs]))
        with get_target("gpu").execution():
            got = np.asarray(jax.jit(ns["kernel"])(*xs))
        passed += compare_fair([want], [want32], [got], Tolerance(0.02, 0.01)).ok  # the judge's bf16 rule
    assert passed == 4


# --- a norm before the MLP: its own whole-rows kernel (mk.author.prologue) ----------------------------------------

def _prenorm_residual(x, scale, bias, w1, b1, w2, b2):  # ViT: x + MLP(LayerNorm(x))
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale + bias
    return x + (jax.nn.gelu(y @ w1 + b1, approximate=False) @ w2 + b2)


def _rms_swiglu(x, g, wg, wu, wd):  # LLaMA: SwiGLU(RMSNorm(x)), bf16 with float32 statistics
    h = x.astype(jnp.float32)
    h = (h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-5) * g.astype(jnp.float32)).astype(x.dtype)
    return (jax.nn.silu(h @ wg) * (h @ wu)) @ wd


PRENORM = {
    "prenorm_residual": (_prenorm_residual, [((2, 40, 128), _F32), ((128,), _F32), ((128,), _F32), ((128, 256), _F32),
                                             ((256,), _F32), ((256, 128), _F32), ((128,), _F32)]),
    "rms_swiglu": (_rms_swiglu, [((48, 128), _BF16), ((128,), _BF16), ((128, 256), _BF16), ((128, 256), _BF16),
                                 ((256, 128), _BF16)]),
}


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("name", sorted(PRENORM))
def test_a_norm_before_the_mlp_is_its_own_kernel(name, target):
    fn, shapes = PRENORM[name]
    rows = [(tuple(2 * n if k == 0 and i == 0 else n for k, n in enumerate(s)), d) for i, (s, d) in enumerate(shapes)]
    prop, ns = _written_and_run(fn, shapes, name, target, (shapes, rows), 5e-2 if shapes[0][1] == _BF16 else 1e-4, 2,
                                big_inputs=2)
    assert "def _prologue(" in prop.source and f"rowwise_{target}(" in prop.source
    # lowered for the chip as the judge's compile stage does: neither Mosaic nor Triton lowers lax.erf or lax.erfc
    # (exact GELU), which the kernel computes with its own _erf
    get_target(target).lower(ns["kernel"], *[jax.ShapeDtypeStruct(s, d) for s, d in shapes])


# --- found by a kernel engineer who attacked this family (stop 39); each was wrong or crashed before its fix -------

def test_lax_round_and_integer_division_keep_their_meaning():
    """The emitter wrote lax.round (halves away from zero) as jnp.round (halves to even): a kernel that rounded 2.5
    to 2 was judged correct on tpu; and an integer division as true division (shared by every emitted body)."""
    from mk.loaders.callable import task_from_callable

    def rnd(x, w1, w2, k):
        return lax.round(x @ w1) @ w2 * (k // 2)

    shapes = [((64, 128), _F32), ((128, 256), _F32), ((256, 128), _F32), ((128,), "int32")]
    task = task_from_callable(rnd, scales={"ci": shapes}, name="rnd")
    ns = {}
    exec(compile(swiglu.propose(task, trace_scales(task), "tpu").source, "candidate", "exec"), ns)  # noqa: S102
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.integers(0, 4, size=(64, 128)), jnp.float32)
    w1 = jnp.asarray(rng.integers(-2, 3, size=(128, 256)) * 0.5, jnp.float32)  # many products end in .5
    w2 = jnp.asarray(rng.normal(size=(256, 128)), jnp.float32)
    k = jnp.asarray(rng.integers(-9, 10, size=(128,)), jnp.int32)
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(ns["kernel"])(x, w1, w2, k))
    np.testing.assert_allclose(got, np.asarray(jax.jit(rnd)(x, w1, w2, k)), atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("fn,shapes,why", [
    (lambda x, w1, w2, b: jax.nn.relu(x @ w1 + b) @ w2, [((2, 8, 128), _F32), ((128, 256), _F32), ((256, 128), _F32),
                                                        ((1, 1, 256), _F32)], "rank 1 or 2"),
    (lambda x, w1, w2: jax.nn.relu(x.reshape(-1, x.shape[-1]) @ w1) @ w2,
     [((2, 8, 128), _F32), ((128, 256), _F32), ((256, 128), _F32)], "left flat"),
    (lambda x, w1, w2: jnp.maximum(x @ w1, 0) @ w2, [((16, 128), "int32"), ((128, 256), "int32"),
                                                      ((256, 128), "int32")], "integer matrix product"),
    (lambda x, w1, w2: jnp.dot(jax.nn.relu(jnp.dot(x, w1, precision=lax.DotAlgorithmPreset.F32_F32_F32)), w2),
     [((16, 128), _F32), ((128, 256), _F32), ((256, 128), _F32)], "not a lax.Precision"),
])
def test_what_the_written_kernel_cannot_do_is_declined(fn, shapes, why):
    from mk.loaders.callable import task_from_callable

    task = task_from_callable(fn, scales={"ci": shapes}, name="attack")
    with pytest.raises(Unsupported, match=why):
        swiglu.propose(task, trace_scales(task), "gpu")


def test_inputs_named_like_the_kernels_old_locals_run_and_a_config_name_is_declined():
    """Inputs named e, d, g or y shadowed the written kernel's locals (a crash or a duplicate argument); the kernel's
    own names now start with an underscore, and an input named like a tuning keyword (block_m) is declined."""
    from mk.loaders.callable import task_from_callable

    def mlp(e, g, y, d):
        return jax.nn.relu(e @ g) @ y + d

    shapes = [((16, 128), _F32), ((128, 256), _F32), ((256, 128), _F32), ((128,), _F32)]
    task = task_from_callable(mlp, scales={"ci": shapes}, name="names")
    ns = {}
    exec(compile(swiglu.propose(task, trace_scales(task), "tpu").source, "candidate", "exec"), ns)  # noqa: S102
    xs = [jnp.asarray(np.random.default_rng(1).normal(size=s), jnp.float32) for s, _ in shapes]
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(ns["kernel"])(*xs))
    np.testing.assert_allclose(got, np.asarray(jax.jit(mlp)(*xs)), atol=1e-4, rtol=1e-4)

    def tuned(x, w1, block_m):
        return jax.nn.relu(x @ w1) @ block_m

    task = task_from_callable(tuned, scales={"ci": shapes[:3]}, name="tuned")
    with pytest.raises(Unsupported, match=r"named like a name of the written kernel: \['block_m'\]"):
        swiglu.propose(task, trace_scales(task), "tpu")


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_one_row_with_an_output_bias_and_a_boolean_hidden_side(target):
    from mk.loaders.callable import task_from_callable

    def mlp(x, w1, m, w2, b):
        return jnp.where(~m, jax.nn.relu(x @ w1), 0.0) @ w2 + b

    shapes = [((1, 128), _F32), ((128, 256), _F32), ((256,), "bool"), ((256, 128), _F32), ((128,), _F32)]
    task = task_from_callable(mlp, scales={"ci": shapes}, name="one_row")
    ns = {}
    exec(compile(swiglu.propose(task, trace_scales(task), target).source, "candidate", "exec"), ns)  # noqa: S102
    rng = np.random.default_rng(5)
    xs = [jnp.asarray(rng.normal(size=s), d) if d != "bool" else jnp.asarray(rng.random(s) < 0.5) for s, d in shapes]
    with get_target(target).execution():
        got = np.asarray(jax.jit(ns["kernel"])(*xs))
    np.testing.assert_allclose(got, np.asarray(jax.jit(mlp)(*xs)), atol=1e-4, rtol=1e-4)
