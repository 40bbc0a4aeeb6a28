"""mk.kernels.retention: the TPU (streamed and VMEM-resident) and GPU (two passes and one) kernels in interpret mode
against the plain-JAX reference, for RetNet's |row|-sum and Mamba-2's signed row sum, lengths that are and are not
multiples of the blocks, in bf16 and f32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import retention as kr
from mk.kernels.retention import Config, Shapes, default, reference, space
from mk.targets import get_target
from tests.kernels.chip_compile import compiled, fits, needs_cuda


def _inputs(b, h, s, d, dtype, mamba, seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    q, k, v = (jax.random.normal(x, (b, h, s, d), jnp.float32).astype(dtype) for x in ks[:3])
    if mamba:  # cumsum(log a), a ~ sigmoid(N(-4, 0.5))
        c = jnp.cumsum(jnp.log(jax.nn.sigmoid(-4.0 + 0.5 * jax.random.normal(ks[3], (b, h, s))) + 1e-8), -1)
    else:  # RetNet: i * log(gamma_h)
        lg = jnp.log(1.0 - 2.0 ** (-5.0 - jnp.arange(h, dtype=jnp.float32)))
        c = jnp.broadcast_to(lg[:, None] * jnp.arange(s, dtype=jnp.float32), (b, h, s))
    return q, k, v, c


def _signed(s):
    return s


@pytest.mark.parametrize("target,variant", [("tpu", {"resident": False}), ("tpu", {"resident": True}),
                                            ("gpu", {"one_pass": False}), ("gpu", {"one_pass": True})])
@pytest.mark.parametrize("s,dtype,mamba", [(256, jnp.bfloat16, False), (200, jnp.float32, True)])
def test_matches_reference(target, variant, s, dtype, mamba):
    q, k, v, c = _inputs(1, 2, s, 64, dtype, mamba)
    pre = _signed if mamba else None
    cfg = Config(block_q=64, block_k=128) if target == "tpu" else Config(block_q=32, block_k=32)
    with get_target(target).execution():
        got = jax.jit(lambda *a: kr.retention(*a, target=target, config=cfg, pre=pre, **variant))(q, k, v, c)
    want = reference(q, k, v, c, pre=pre)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-4
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=tol, rtol=tol)


def test_the_normaliser_matters():
    """The reference divides by the row statistic: without it the kernel's result would differ (the test can fail)."""
    q, k, v, c = _inputs(1, 1, 128, 64, jnp.float32, False)
    with get_target("tpu").execution():
        got = kr.retention(q, k, v, c, target="tpu", post=lambda d: jnp.ones_like(d))
    assert not np.allclose(np.asarray(got), np.asarray(reference(q, k, v, c)), atol=1e-2)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_kernels_lower(target):
    st = jax.ShapeDtypeStruct
    q, c = st((1, 4, 512, 128), jnp.bfloat16), st((1, 4, 512), jnp.float32)
    for flag in (False, True):
        kw = {"resident": flag} if target == "tpu" else {"one_pass": flag}
        get_target(target).lower(lambda a, b, x, y: kr.retention(a, b, x, y, target=target, **kw), q, q, q, c)


def test_config_default_and_space():
    with pytest.raises(ValueError, match="block_q"):
        Config(block_q=4)
    with pytest.raises(ValueError, match="TPU blocks"):
        Config(block_k=96).check("tpu")
    with pytest.raises(ValueError, match="powers of two"):
        Config(block_q=48).check("gpu")
    full = Shapes(b=4, h=16, s=4096, d=256, dv=256)
    tpu = default("v6e", full)
    assert tpu.block_k == 512 and tpu.block_q >= 128  # two MXU widths (256 on v6e)
    assert default("v5e", full).block_k == 256 and default("v5e", Shapes(1, 1, 384, 64, 64)).block_k == 128
    assert default("h200", full).block_q == 32  # a 256-wide head: smaller blocks
    for target in ("tpu", "gpu"):
        sp = space(target, full)
        assert all(k in Config.__dataclass_fields__ for k in sp) and all(sp.values())


@pytest.mark.parametrize("one_pass", [False, True])
def test_gpu_block_fits_a_small_shared_memory_budget_and_stays_correct(one_pass):
    # head 320 pads to 512: a 48 KiB budget forces the block (and warps) to fit at trace time
    q, k, v, c = _inputs(1, 2, 96, 320, jnp.bfloat16, False)
    with get_target("gpu").execution():
        got = kr.gpu.retention_gpu(q, k, v, c, block_q=64, block_k=64, num_warps=4, smem_bytes=48 << 10,
                                   one_pass=one_pass)
    want = reference(q, k, v, c)
    tol = 6e-2 if one_pass else 2e-2  # one pass rounds the scores before the division (see the module docstring)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=tol, rtol=tol)


@needs_cuda
def test_gpu_kernel_written_at_ci_compiles_for_h100_at_held_out_and_full_sizes():
    # the configuration the offline author writes at jaxbench 15p's ci size, at a held-out size with a 384-wide head
    # (once 320 KiB of shared memory) and at the full size (once 250 registers a thread)
    cfg = default("h200", Shapes(1, 4, 128, 128, 128)).kwargs("gpu")
    for shape in ((1, 16, 384, 384), (4, 16, 4096, 256)):
        s, c = jax.ShapeDtypeStruct(shape, jnp.bfloat16), jax.ShapeDtypeStruct(shape[:3], jnp.float32)
        fits(compiled(lambda q, k, v, c: kr.gpu.retention_gpu(q, k, v, c, **cfg), s, s, s, c))
