"""The offline author's MoE recogniser: 10p's dense top-k mixture is written as a sparse one (choices sorted by
expert, the expert MLP fused in mk.kernels.gmm.mlp_*; or unsorted, skipping unchosen (tile, expert) pairs in
mk.kernels.gmm.masked_*) in standalone files that passes the static check and matches
the reference at other sizes and another k; a combine that is not zero outside the top-k is declined."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import moe
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.task import StaticArg
from mk.targets import get_target


def _task():
    task = load_task("jaxbench:10p_Sparse_MoE")
    return task.with_scales({"ci": task.scale("ci")})


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_written_kernel_is_sparse_standalone_and_general(target):
    task = _task()
    props = moe.propose(task, trace_scales(task), target)
    assert [p.name for p in props] == [f"moe-{target}", f"moe-{target}-masked"]
    assert f"def gmlp_{target}(" in props[0].source and f"def masked_mlp_{target}(" in props[1].source
    ci = task.scale("ci")
    other = dataclasses.replace(task.with_scales({"ci": dataclasses.replace(ci, dims={**ci.dims, "S": 24, "N": 6})}),
                                static=(StaticArg("num_experts_per_tok", 3),))
    xs = other.make_inputs("ci", 1, "normal")
    want = np.asarray(other.bind(other.reference, "ci")(*xs), np.float32)
    for prop in props:
        assert prop.template == "moe" and "from mk" not in prop.source
        assert "lax.top_k(" in prop.source and "jax.nn.sigmoid(g)" in prop.source  # the reference's router and gate
        assert check_source(prop.source, target=target, require_pallas=True).ok
        ns = {}
        exec(compile(prop.source, "candidate", "exec"), ns)
        with get_target(target).execution():
            got = np.asarray(jax.jit(other.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
        np.testing.assert_allclose(got, want, atol=2e-3, rtol=5e-2)


def test_declines_a_dense_combine():
    task = _task()

    def dense(x, router_weights, gate, up, down, num_experts_per_tok):  # softmax over all experts: not sparse
        logits = jnp.dot(x, router_weights)
        _, idx = jax.lax.top_k(logits, num_experts_per_tok)
        w = jax.nn.softmax(logits.astype(jnp.float32), axis=-1) + 0.0 * idx.sum()
        h = jax.nn.silu(jnp.einsum("bse,nem->bsnm", x, gate)) * jnp.einsum("bse,nem->bsnm", x, up)
        y = jnp.einsum("bsnm,nme->bsne", h, down)
        return jnp.einsum("bsne,bsn->bse", y, w)

    task = dataclasses.replace(task, reference=dense)
    with pytest.raises(Unsupported, match="not zero outside the top_k"):
        moe.propose(task, trace_scales(task), "tpu")
