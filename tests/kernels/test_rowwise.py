"""mk.kernels.rowwise: the whole-rows pallas_call skeleton (TPU and GPU, interpret mode) running a body passed as a
callable, against reference.py (the body on all rows at once): row inputs with and without trailing axes, resident
parameters and 0-d scalars, several outputs, rows the blocks divide and ones they do not, f32 and bf16."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.kernels import rowwise as krw
from mk.kernels.rowwise import Config
from mk.kernels.rowwise.gpu import _rw_block as gpu_block
from mk.kernels.rowwise.tpu import _rw_block as tpu_block
from mk.targets import get_target
from tests.kernels.chip_compile import compiled, fits, needs_cuda


def _rms_body(x, w, *, d):
    """RMSNorm of a row block (x (rows, d_padded) on GPU: the padding is zero, so the sum of squares ignores it)."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.sum(xf * xf, axis=-1, keepdims=True) / d + 1e-6) * w.astype(jnp.float32)
    return (y.astype(x.dtype),)


def _two_out_body(x, s, scale):
    """Two outputs: a per-row sum (no trailing axes) and x * scale + s (s a per-row input without trailing axes)."""
    return jnp.sum(x, axis=-1), x * scale + s[:, None]


@pytest.mark.parametrize("target,shape,dtype,block", [
    ("tpu", (4, 16, 384), jnp.float32, 32),
    ("tpu", (3, 40, 256), jnp.bfloat16, 64),  # 120 rows: 16-row tiles do not divide, 8-row ones do (f32 out)
    ("tpu", (7, 128), jnp.float32, 512),  # 7 rows: no multiple of 8 divides, one block of all the rows
    ("gpu", (4, 16, 384), jnp.float32, 32),  # 384 padded to 512
    ("gpu", (3, 40, 200), jnp.bfloat16, 64),
])
def test_rmsnorm_body(target, shape, dtype, block):
    k = jax.random.split(jax.random.key(0), 2)
    x = jax.random.normal(k[0], shape, jnp.float32).astype(dtype)
    w = (1 + 0.2 * jax.random.normal(k[1], (shape[-1],), jnp.float32)).astype(dtype)
    body = functools.partial(_rms_body, d=shape[-1])
    sub = 16 if dtype == jnp.bfloat16 else 8
    with get_target(target).execution():
        got = jax.jit(lambda a, b: krw.rowwise(body, [a, b], row_inputs=(True, False), lead=len(shape) - 1,
                                               target=target, config=Config(block_rows=block), sublanes=sub))(x, w)
    want = krw.rowwise_reference(body, [x, w], row_inputs=(True, False), lead=len(shape) - 1)
    assert len(got) == 1 and got[0].shape == shape and got[0].dtype == dtype
    tol = 1e-2 if dtype == jnp.bfloat16 else 1e-6
    np.testing.assert_allclose(np.asarray(got[0], np.float32), np.asarray(want[0], np.float32), atol=tol, rtol=tol)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_several_outputs_row_vectors_and_scalars(target):
    x = jax.random.normal(jax.random.key(1), (2, 24, 128), jnp.float32)
    s = jnp.arange(48, dtype=jnp.float32).reshape(2, 24)
    scale = jnp.asarray(-1.5, jnp.float32)
    fn = krw.rowwise_tpu if target == "tpu" else krw.rowwise_gpu
    with get_target(target).execution():
        got = jax.jit(lambda *a: fn(_two_out_body, list(a), row_inputs=(True, True, False), lead=2, block_rows=16))(
            x, s, scale)
    want = krw.rowwise_reference(_two_out_body, [x, s, scale], row_inputs=(True, True, False), lead=2)
    assert [g.shape for g in got] == [(2, 24), (2, 24, 128)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=1e-5)


def test_blocks_and_errors():
    assert tpu_block(120, 64, 1024, 16, 16 * 2**20) == 120 and tpu_block(120, 64, 1024, 8, 16 * 2**20) == 40
    assert tpu_block(4096, 4096, 2**16, 8, 2**20) == 8  # the budget caps the block
    assert gpu_block(96, 64, 64, 393216) == 32 and gpu_block(7, 64, 64, 393216) == 1
    with pytest.raises(ValueError, match="row_inputs"):
        krw.rowwise_tpu(_two_out_body, [jnp.ones((8, 128))], row_inputs=(False,), lead=1)
    with pytest.raises(ValueError, match="TPU"):
        Config(block_rows=12).check("tpu")
    with pytest.raises(ValueError, match="GPU"):
        Config(block_rows=12).check("gpu")
    space = krw.space("tpu", krw.Shapes(nrows=4096, row_bytes=4096 * 6, sublanes=16))
    assert space and all(b % 16 == 0 and 2 * b * 4096 * 6 <= krw.budget("tpu") for b in space)
    assert krw.default("gpu", krw.Shapes(nrows=64, row_bytes=512)).block_rows == 64


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lowers(target):
    x = jnp.ones((64, 1000), jnp.bfloat16)
    w = jnp.ones((1000,), jnp.bfloat16)
    body = functools.partial(_rms_body, d=1000)
    get_target(target).lower(lambda a, b: krw.rowwise(body, [a, b], row_inputs=(True, False), lead=1, target=target,
                                                      sublanes=16), x, w)


def test_gpu_rows_and_warps_fitted_to_the_row_width():
    from mk.kernels.rowwise.gpu import _rw_fit

    # jaxbench 12p at full: 4-row blocks of 8192 bf16 at 4 warps held 256 elements a thread (255 registers, spills)
    assert _rw_fit(8, 4, 8192, 8192) == (1, 8)
    assert _rw_fit(8, 4, 4096, 4096) == (2, 8)
    assert _rw_fit(1, 4, 65536, 65536) == (1, 16)  # as far as one row goes
    assert _rw_fit(64, 4, 32, 32) == (64, 4)  # narrow rows keep the request


@needs_cuda
def test_gpu_rmsnorm_compiles_for_h100_at_jaxbench_12p_full_size_without_spills():
    # 8x4096 rows of 8192 bf16 at the written kernel's request (4-row blocks within the budget, 4 warps): was 255
    # registers and 1064 B of spills
    body = functools.partial(_rms_body, d=8192)
    st = jax.ShapeDtypeStruct
    fn = lambda x, w: krw.rowwise_gpu(body, [x, w], row_inputs=(True, False), lead=2, block_rows=64,  # noqa: E731
                                      budget=krw.budget("gpu"))[0]
    fits(compiled(fn, st((8, 4096, 8192), jnp.bfloat16), st((8192,), jnp.bfloat16)))
