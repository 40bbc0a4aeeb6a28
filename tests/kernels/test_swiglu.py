"""mk.kernels.swiglu: the TPU and GPU kernels in interpret mode against the plain-JAX reference (bf16 and f32, sizes
the blocks divide and sizes they do not), another gate through the same kernels, lowering, Config and space."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import swiglu as ksw
from mk.kernels.swiglu import Config, Shapes, default, reference, space
from mk.targets import get_target
from tests.kernels.chip_compile import compiled, fits, needs_cuda, needs_libtpu, vmem


def _inputs(m, e, f, d, dtype, seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (m, e), jnp.float32).astype(dtype)
    w = [(jax.random.normal(kk, s, jnp.float32) * 0.05).astype(dtype) for kk, s in zip(k[1:], [(e, f), (e, f), (f, d)])]
    return [x, *w]


def _run(target, args, cfg, **kw):
    with get_target(target).execution():
        return np.asarray(jax.jit(lambda *a: ksw.swiglu(*a, target=target, config=cfg, **kw))(*args), np.float32)


@pytest.mark.parametrize("target,shape,dtype,cfg", [
    ("tpu", (2, 32, 128, 384, 128), jnp.bfloat16, Config(block_m=32, block_f=128)),  # (B, S, E) input, 3 hidden blocks
    ("tpu", (48, 128, 256, 64), jnp.float32, Config(block_m=16, block_f=128)),
    ("gpu", (40, 48, 100, 24), jnp.float32, Config(block_m=16, block_f=32, block_n=16)),  # padded, masked hidden
    ("gpu", (64, 128, 384, 128), jnp.bfloat16, Config(block_m=32, block_f=64, block_n=64)),
])
def test_matches_reference(target, shape, dtype, cfg):
    *lead, e, f, d = shape
    x, wg, wu, wd = _inputs(int(np.prod(lead)), e, f, d, dtype)
    x = x.reshape(*lead, e)
    got = _run(target, [x, wg, wu, wd], cfg)
    want = np.asarray(reference(x, wg, wu, wd), np.float32)
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


def test_another_gate_through_the_same_kernel():
    args = _inputs(32, 128, 256, 128, jnp.float32, seed=1)
    gelu_gate = lambda g, u: jax.nn.gelu(g) * u  # noqa: E731 - GeGLU
    got = _run("tpu", args, Config(block_m=16, block_f=128), activation=gelu_gate)
    np.testing.assert_allclose(got, np.asarray(reference(*args, activation=gelu_gate)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_kernels_lower(target):
    args = _inputs(64, 128, 384, 128, jnp.bfloat16)
    get_target(target).lower(lambda *a: ksw.swiglu(*a, target=target), *args)


def test_config_default_and_space():
    with pytest.raises(ValueError, match="block_f"):
        Config(block_f=4)
    with pytest.raises(ValueError, match="TPU blocks"):
        Config(block_f=96).check("tpu")
    full = Shapes(m=8192, e=4096, f=14336, d=4096)
    v6e, v7x = default("v6e", full), default("v7x", full)
    assert v6e.block_f % 256 == 0 and v6e.block_m * v6e.block_f >= v7x.block_m * v7x.block_f  # v7x: half the VMEM
    assert default("h200", Shapes(m=64, e=128, f=384, d=128)).block_n == 128
    for target in ("tpu", "gpu"):
        sp = space(target, full)
        assert all(k in Config.__dataclass_fields__ for k in sp) and all(sp.values())


def test_gpu_blocks_fit_a_small_shared_memory_budget_and_stay_correct():
    # a 16 KiB budget halves the E, hidden and column blocks the request asks for; E (200) spans several E blocks
    x, wg, wu, wd = _inputs(48, 200, 160, 72, jnp.bfloat16)
    cfg = Config(block_m=64, block_f=64, block_n=128, block_e=128, num_warps=4, smem_bytes=16 << 10)
    got = _run("gpu", [x, wg, wu, wd], cfg)
    np.testing.assert_allclose(got, np.asarray(reference(x, wg, wu, wd), np.float32), atol=2e-2, rtol=2e-2)


@needs_cuda
def test_gpu_kernel_written_at_ci_compiles_for_h100_at_held_out_and_full_sizes():
    # the configuration the offline author writes at jaxbench 9p's ci size, called at a fresh size (once 688 KiB of
    # shared memory: whole (E, F) gate and up operands) and at the full size (once 5.2 MB)
    cfg = default("h200", Shapes(m=64, e=128, f=384, d=128)).kwargs("gpu")
    bf16 = jnp.bfloat16
    for m, e, f, d in ((768, 640, 768, 640), (8192, 8192, 28672, 8192)):
        structs = [jax.ShapeDtypeStruct(s, bf16) for s in ((m, e), (e, f), (e, f), (f, d))]
        fits(compiled(lambda *a: ksw.swiglu_gpu(*a, **cfg), *structs))


def test_tpu_blocks_split_e_when_the_whole_e_does_not_fit_and_stay_correct():
    # a budget too small for the whole E (256 bf16 columns) makes the kernel run E in 128-wide blocks with the gate
    # and up products accumulated in f32 scratch; the answer is the reference's
    from mk.kernels.swiglu.tpu import swiglu_blocks, swiglu_tpu

    sizes = dict(x_itemsize=2, w_itemsize=2, out_itemsize=2)
    whole = swiglu_blocks(64, 256, 384, 128, block_m=64, block_f=128, budget=12 << 20, **sizes)
    assert whole == (64, 128, 256)
    split = swiglu_blocks(64, 256, 384, 128, block_m=64, block_f=128, budget=300 << 10, **sizes)
    assert split == (32, 128, 128), split
    args = _inputs(64, 256, 384, 128, jnp.bfloat16, seed=3)
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(lambda *a: swiglu_tpu(*a, block_m=64, block_f=128, vmem_budget=300 << 10))(*args),
                         np.float32)
    want = np.asarray(reference(*args), np.float32)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)


@needs_libtpu
@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_tpu_kernel_compiles_for_jaxbench_9p_at_full_within_the_chips_scoped_vmem(chip):
    # 9p at full: E = 8192, F = 28672, D = 8192 in bf16; the whole-E blocks took 30 MiB, over v5e's 16 MiB
    from mk.kernels.swiglu.tpu import swiglu_tpu

    bf16 = jnp.bfloat16
    structs = [jax.ShapeDtypeStruct(s, bf16) for s in ((8192, 8192), (8192, 28672), (8192, 28672), (28672, 8192))]
    result = compiled(lambda *a: swiglu_tpu(*a), *structs, chip=chip)
    assert all(b <= result.limits["scoped_vmem_bytes"] for b in vmem(result)), result.kernels  # the chip's default


# --- the other MLPs models write, through the same kernels (issue 25 item 1) ---------------------------------------

def _layouts(m, e, f, d, dtype, halves, up_t, down_t, gated, seed=3):
    x, wg, wu, wd = _inputs(m, e, f, d, dtype, seed=seed)
    if halves:
        wg, wu = jnp.concatenate([wg, wu], axis=1), None
    elif not gated:
        wu = None
    if up_t:
        wg, wu = wg.T, (None if wu is None else wu.T)
    return x, wg, wu, (wd.T if down_t else wd)


_SQ_RELU = lambda g: jnp.square(jax.nn.relu(g))  # noqa: E731 - Primer's squared ReLU
_GELU = lambda g, u: jax.nn.gelu(g) * u  # noqa: E731


@pytest.mark.parametrize("target,shape,dtype,cfg", [
    ("tpu", (48, 128, 256, 128), jnp.float32, Config(block_m=16, block_f=128)),
    ("tpu", (32, 128, 96, 64), jnp.float32, Config(block_m=16, block_f=128)),  # F not a multiple of 128
    ("gpu", (40, 48, 100, 24), jnp.float32, Config(block_m=16, block_f=32, block_n=16)),  # padded everywhere
])
@pytest.mark.parametrize("halves,up_t,down_t,gated", [
    (False, False, False, False), (True, False, False, True), (True, True, True, True), (False, True, True, False),
    (False, True, False, True)])
def test_other_mlps_match_the_reference(target, shape, dtype, cfg, halves, up_t, down_t, gated):
    m, e, f, d = shape
    args = _layouts(m, e, f, d, dtype, halves, up_t, down_t, gated)
    act = _GELU if gated else _SQ_RELU
    kw = dict(halves=halves, up_t=up_t, down_t=down_t, activation=act)
    got = _run(target, list(args), cfg, **kw)
    want = np.asarray(reference(*args, **kw), np.float32)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_other_mlps_with_e_in_blocks():
    """The TPU kernel's third grid axis (E in blocks when a whole row does not fit) in each layout."""
    from mk.kernels.swiglu.tpu import swiglu_tpu

    for halves, up_t, down_t, gated in [(False, False, False, False), (True, True, True, True)]:
        args = _layouts(64, 256, 384, 128, jnp.float32, halves, up_t, down_t, gated)
        act = _GELU if gated else _SQ_RELU
        kw = dict(halves=halves, up_t=up_t, down_t=down_t, activation=act)
        with get_target("tpu").execution():
            got = np.asarray(jax.jit(lambda *a: swiglu_tpu(*a, block_m=64, block_f=128, vmem_budget=300 << 10,
                                                           **kw))(*args))
        np.testing.assert_allclose(got, np.asarray(reference(*args, **kw)), atol=1e-4, rtol=1e-4)


@needs_libtpu
@needs_cuda
def test_other_mlps_compile_for_the_chips_at_a_model_size():
    """Phi-3-mini's fused gate-up MLP ((8192, 3072) tokens, F = 8192, weights (out, in)) and Primer's ungated
    squared-ReLU MLP, bf16, compiled for v6e (within scoped VMEM) and H100 (within shared memory)."""
    from mk.kernels.swiglu.tpu import swiglu_tpu

    bf16 = jnp.bfloat16
    cases = [(dict(halves=True, up_t=True, down_t=True, activation=_GELU), ((8192, 3072), (16384, 3072), None,
                                                                           (3072, 8192))),
             (dict(activation=_SQ_RELU), ((8192, 2048), (2048, 8192), None, (8192, 2048)))]
    for kw, shapes in cases:
        structs = [None if s is None else jax.ShapeDtypeStruct(s, bf16) for s in shapes]
        args = [s for s in structs if s is not None]

        def call(fn, **more):
            return lambda x, w1, wd: fn(x, w1, None, wd, **kw, **more)

        result = compiled(call(swiglu_tpu), *args, chip="v6e")
        assert all(b <= result.limits["scoped_vmem_bytes"] for b in vmem(result)), result.kernels
        fits(compiled(call(ksw.swiglu_gpu, **default("h200", Shapes(m=64, e=128, f=384, d=128)).kwargs("gpu")),
                      *args))


@pytest.mark.parametrize("target,cfg", [("tpu", Config(block_m=16, block_f=128)),
                                        ("gpu", Config(block_m=16, block_f=32, block_n=16))])
@pytest.mark.parametrize("gated", [False, True])
def test_biases_and_a_residual_epilogue(target, cfg, gated):
    """GPT-2's MLP: gelu(x @ w1 + b1) @ w2 + b2, and + a residual (M, D) side; gated: silu(g + bg) * u."""
    m, e, f, d = 40, 128, 256, 128
    x, wg, wu, wd = _inputs(m, e, f, d, jnp.float32, seed=5)
    k = jax.random.split(jax.random.key(7), 3)
    b1 = jax.random.normal(k[0], (1, f), jnp.float32)
    b2 = jax.random.normal(k[1], (1, d), jnp.float32)
    res = jax.random.normal(k[2], (m, d), jnp.float32)
    act = (lambda g, u, b: jax.nn.silu(g + b) * u) if gated else (lambda g, b: jax.nn.gelu(g + b, approximate=True))
    kw = dict(activation=act, hidden_sides=(b1,), out_sides=(b2, res), epilogue=lambda y, b, r: y + b + r)
    args = [x, wg, wu if gated else None, wd]
    got = _run(target, args, cfg, **kw)
    np.testing.assert_allclose(got, np.asarray(reference(*args, **kw)), atol=1e-4, rtol=1e-4)
    if target == "tpu":  # E in blocks, the sides through the split kernel
        from mk.kernels.swiglu.tpu import swiglu_tpu

        with get_target("tpu").execution():
            split = np.asarray(jax.jit(lambda *a: swiglu_tpu(*a, block_m=8, block_f=128, vmem_budget=200 << 10,
                                                             **kw))(*args))
        np.testing.assert_allclose(split, np.asarray(reference(*args, **kw)), atol=1e-4, rtol=1e-4)
