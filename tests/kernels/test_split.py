"""Epilogues split at a statistic across rows (mk/author/split.py): the kernel fuses the row-local part and the
rest runs after it on whole arrays; 31k (matmul, BatchNorm over the batch) is right at a size the author never saw."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import matmul
from mk.author.emit import Emitter, Unsupported
from mk.author.split import split_epilogue
from mk.author.trace import trace_scales
from mk.loaders import load_task
from mk.targets import get_target


def test_matmul_with_batch_norm_over_rows_splits_and_is_general():
    task = load_task("jaxbench:31k_Gemm_BatchNorm_GELU_ReLU")
    ci = task.scale("ci")
    task = task.with_scales({"ci": ci})
    prop = matmul.propose(task, trace_scales(task), "tpu")[0]
    assert "def _tail(y" in prop.source and "after the kernel in XLA" in prop.rationale
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    dims = {k: (2 * v if isinstance(v, int) and v >= 8 else v) for k, v in ci.dims.items()}
    other = task.with_scales({"ci": dataclasses.replace(ci, dims=dims)})
    xs = other.make_inputs("ci", 2, "normal")
    want = np.asarray(other.bind(other.reference, "ci")(*xs), np.float32)
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(other.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
    atol, rtol = other.tolerance.for_output(0)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


def test_a_tail_that_reads_two_fused_values_is_declined():
    def ref(h, b):
        a = jnp.tanh(h)
        c = jnp.exp(h)
        return a - jnp.mean(c, axis=0) + b  # the tail needs a and c: two values of the row-local part

    closed = jax.make_jaxpr(ref)(jnp.zeros((8, 16)), jnp.zeros((16,)))
    j = closed.jaxpr

    def make():
        em = Emitter(1)
        em.bind(j.invars[0], "acc", True)
        em.bind(j.invars[1], "b", False)
        return em

    with pytest.raises(Unsupported, match="several values"):
        split_epilogue(make, list(j.eqns), list(j.outvars), [(j.invars[1], "b")], None, set())


def test_an_output_that_moves_the_rows_is_split_too():
    """40k: GroupNorm and a row min fused; the min reshaped to (1, 1, B, 1) plus a (1, N, 1, 1) bias after it."""
    task = load_task("jaxbench:40k_Gemm_GroupNorm_Min_BiasAdd")
    task = task.with_scales({"ci": task.scale("ci")})
    prop = matmul.propose(task, trace_scales(task), "tpu")[0]
    tail = prop.source[prop.source.index("def _tail("):prop.source.index("def kernel(")]
    assert "reshape" in tail and "jnp.min" not in tail  # the min is fused, the move of rows is not
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    xs = task.make_inputs("ci", 1, "normal")
    want = np.asarray(task.bind(task.reference, "ci")(*xs), np.float32)
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(task.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
    np.testing.assert_allclose(got, want, atol=1e-2, rtol=1e-2)
