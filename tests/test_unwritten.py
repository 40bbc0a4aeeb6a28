"""What the TPU interpreter's memory holds where a kernel has not written (mk/harness/races.py, poison.py).

Each kernel runs in the real TPU interpreter with one of mk's fills and race detection, as the judge's check runs
do: the race state says whether the kernel read an element nothing had written (a flag in the verdict), and an
output block's buffer is double buffered as on a chip (a new block starts in the slot of two changes back).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mk.harness import poison, races
from mk.targets import get_target

TPU = get_target("tpu")


def _seed_with(family: str, fill: str = poison.GARBAGE) -> None:
    poison.seed(next(s for s in range(1000) if (poison.seed(s), poison.family(fill))[1] == family))


def _run(call, *args, family: str = "uniform"):
    """``call(params)`` builds the pallas_call; the outputs and the first unwritten read the interpreter saw."""
    _seed_with(family)
    params = TPU.interpret_params(seed=0, poison=poison.GARBAGE)
    races.start()
    out = jax.block_until_ready(call(params)(*args))
    return out, TPU.unwritten_read()


def _matmul(params, *, init: bool, carry_scratch: bool = True):
    def body(x_ref, y_ref, o_ref, acc_ref):
        k = pl.program_id(1)
        if init:
            @pl.when(k == 0)
            def _():
                acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    return pl.pallas_call(
        body, grid=(2, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, k)), pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)], interpret=params)


X = jnp.ones((16, 256), jnp.float32)
Y = jnp.ones((256, 128), jnp.float32)


def test_an_accumulator_initialised_at_the_first_step_reads_nothing_unwritten():
    out, found = _run(functools.partial(_matmul, init=True), X, Y)
    assert found is None
    np.testing.assert_allclose(np.asarray(out), 256.0)


@pytest.mark.parametrize("family", ["uniform", "normal", "bits"])
def test_an_accumulator_never_initialised_is_found_whatever_the_fill(family):
    _, found = _run(functools.partial(_matmul, init=False), X, Y, family=family)
    assert found is not None and "before anything wrote them" in found and "vmem" in found


def test_a_zero_fill_tracks_nothing():
    # real inputs are zeros too, so a zero fill is not told from an input; the other run's family tracks
    _, found = _run(functools.partial(_matmul, init=False), X, Y, family="zeros")
    assert found is None


def _stale_slot(params):
    # step 0 writes its block; step 1 reads its own block before writing it: the interpreter's slot holds block 0
    # (written), a chip's holds an earlier block too; either way not this block's
    def body(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = x_ref[...]

        @pl.when(pl.program_id(0) > 0)
        def _():
            o_ref[...] = o_ref[...] * 0.0 + x_ref[...]

    return pl.pallas_call(body, grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=params)


def test_an_output_block_read_before_it_is_written_is_found_even_after_an_earlier_block_was_written():
    _, found = _run(_stale_slot, X[:, :128])
    assert found is not None and "before anything wrote them" in found


def test_reading_a_partial_input_blocks_padding_is_not_an_unwritten_read():
    def call(params):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0  # the last block's rows past 20 are padding: read, never written back

        return pl.pallas_call(body, grid=(3,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((20, 128), jnp.float32), interpret=params)

    x = jnp.arange(20 * 128, dtype=jnp.float32).reshape(20, 128)
    out, found = _run(call, x)
    assert found is None
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) * 2.0)


def test_a_buffer_filled_by_a_dma_before_it_is_read_is_written():
    def call(params):
        def body(x_hbm, o_ref, buf, sem):
            copy = pltpu.make_async_copy(x_hbm, buf, sem)
            copy.start()
            copy.wait()
            o_ref[...] = buf[...] + 1.0

        return pl.pallas_call(body, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
                              interpret=params)

    out, found = _run(call, jnp.ones((8, 128), jnp.float32))
    assert found is None
    np.testing.assert_allclose(np.asarray(out), 2.0)


def test_a_dma_out_of_an_unwritten_scratch_is_found():
    def call(params):
        def body(x_ref, o_hbm, buf, sem):
            copy = pltpu.make_async_copy(buf, o_hbm, sem)  # buf never written
            copy.start()
            copy.wait()

        return pl.pallas_call(body, out_specs=pl.BlockSpec(memory_space=pl.ANY),
                              out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
                              interpret=params)

    _, found = _run(call, jnp.ones((8, 128), jnp.float32))
    assert found is not None


@pytest.mark.parametrize("fill", ["nan", poison.GARBAGE])
def test_a_new_output_block_starts_in_the_slot_of_two_block_changes_back(fill):
    # block i keeps what its slot holds (for i >= 1); block 0 writes its inputs: on a chip, block 2's slot is block
    # 0's, block 1's slot was never used
    def call(params):
        def body(x_ref, o_ref):
            o_ref[...] = jnp.where(pl.program_id(0) == 0, x_ref[...], o_ref[...])

        return pl.pallas_call(body, grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), interpret=params)

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128) + 1.0
    _seed_with("uniform")
    out = np.asarray(jax.block_until_ready(call(TPU.interpret_params(seed=0, poison=fill))(x)))
    np.testing.assert_array_equal(out[16:24], np.asarray(x[:8]))  # block 2 = block 0
    assert not np.array_equal(out[8:16], np.asarray(x[:8]))  # block 1: fresh fill, not block 0
    np.testing.assert_array_equal(out[24:32], out[8:16])  # block 3 = block 1
    if fill == "nan":
        assert np.isnan(out[8:16]).all()


def test_a_run_scoped_buffer_starts_with_what_the_last_one_of_its_line_left():
    # on a chip a run_scoped buffer sits at one offset: step 1 finds what step 0 left there (the interpreter used to
    # hand each a fresh fill, so a kernel could leave a marker and cheat only where the next step found it)
    def call(params):
        def body(x_ref, o_ref):
            def scoped(buf):
                o_ref[...] = buf[...] + 0.0 * x_ref[...]  # what this buffer held before this step wrote it
                buf[...] = x_ref[...]

            pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32))

        return pl.pallas_call(body, grid=(3,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((24, 128), jnp.float32), interpret=params)

    x = jnp.arange(24 * 128, dtype=jnp.float32).reshape(24, 128)
    out, found = _run(call, x)
    np.testing.assert_array_equal(out[8:16], np.asarray(x[:8]))  # step 1 read step 0's rows
    np.testing.assert_array_equal(out[16:24], np.asarray(x[8:16]))
    assert found is not None  # step 0 read a buffer nothing had written


def test_a_partial_input_blocks_padding_holds_the_slots_earlier_rows():
    # on a chip a partial block's padding is not copied: the slot keeps the rows of the block two copies back
    def call(params):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...]

        return pl.pallas_call(body, grid=(3,), in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)),
                              out_shape=jax.ShapeDtypeStruct((48, 128), jnp.float32), interpret=params)

    x = jnp.arange(40 * 128, dtype=jnp.float32).reshape(40, 128) + 1.0
    out, _ = _run(call, x)
    np.testing.assert_array_equal(out[:40], np.asarray(x))
    np.testing.assert_array_equal(out[40:48], np.asarray(x[8:16]))  # block 2's padding = block 0's rows 8-15


def test_an_input_whose_own_shape_is_another_inputs_padded_shape_keeps_its_rows():
    # a review of stop 33: inputs were told padded by (padded shape, dtype) alone, so a 24-row input after a 20-row
    # one (padded to 24) had its rows 20-23 overwritten; now only an array whose padding is the fill a pad handed out
    def call(n):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0

        return lambda params: pl.pallas_call(body, grid=(pl.cdiv(n, 8),), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                                             out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                                             out_shape=jax.ShapeDtypeStruct((n, 128), jnp.float32), interpret=params)

    for n in (20, 24):
        x = jnp.arange(n * 128, dtype=jnp.float32).reshape(n, 128)
        out, _ = _run(call(n), x)
        np.testing.assert_array_equal(out, np.asarray(x) * 2.0)
