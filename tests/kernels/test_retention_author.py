"""The offline author's retention recogniser: RetNet (15p) and Mamba-2 SSD (16p) are bound to mk.kernels.retention in
standalone files (two strategies on TPU) that pass the static check and match the reference at another length; a
decay that is not exp(c_i - c_j) is declined."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import retention
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.task import ArgSpec, Init, Scale, Task, Tolerance
from mk.targets import get_target


@pytest.mark.parametrize("name,target", [("15p_RetNet_Retention", "tpu"), ("16p_Mamba2_SSD", "gpu")])
def test_written_kernels_are_standalone_and_general(name, target):
    task = load_task(f"jaxbench:{name}")
    ci = task.scale("ci")
    task = task.with_scales({"ci": ci})
    props = retention.propose(task, trace_scales(task), target)
    assert len(props) == (2 if target == "tpu" else 1) and len({p.rationale for p in props}) == len(props)
    other = task.with_scales({"ci": dataclasses.replace(ci, dims={**ci.dims, "S": 96, "H": 3})})
    xs = other.make_inputs("ci", 2, "normal")
    want = np.asarray(other.bind(other.reference, "ci")(*xs), np.float32)
    for prop in props:
        assert prop.template == "retention" and "from mk" not in prop.source and f"def retention_{target}(" in prop.source
        assert check_source(prop.source, target=target, require_pallas=True).ok
        ns = {}
        exec(compile(prop.source, "candidate", "exec"), ns)
        with get_target(target).execution():
            got = np.asarray(jax.jit(other.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
        np.testing.assert_allclose(got, want, atol=2e-2, rtol=1e-2)


def _decayed(decay):
    def ref(q, k, v):
        h, s = q.shape[1:3]
        sc = jnp.einsum("bhsd,bhtd->bhst", q, k) * decay(h, s)
        sc = sc / jnp.maximum(jnp.sum(jnp.abs(sc), axis=-1, keepdims=True), 1.0)
        return jnp.einsum("bhst,bhtd->bhsd", sc, v)

    spec = ArgSpec("q", ("B", "H", "S", "D"), "float32", Init("normal"))
    return Task(name="decayed", reference=ref, args=(spec, dataclasses.replace(spec, name="k"),
                                                    dataclasses.replace(spec, name="v")),
                static=(), tolerance=Tolerance(atol=1e-3, rtol=1e-3),
                scales={"ci": Scale("ci", dims={"B": 1, "H": 2, "S": 32, "D": 16})}, default_scale="ci")


def test_declines_a_decay_that_is_not_exponential():
    linear = _decayed(lambda h, s: jnp.maximum(1.0 - (0.5 / (1.0 + jnp.arange(h)))[:, None, None] * jnp.maximum(
        jnp.arange(s)[:, None] - jnp.arange(s)[None, :], 0), 0.0) * jnp.tril(jnp.ones((s, s))))
    with pytest.raises(Unsupported, match="decay"):
        retention.propose(linear, trace_scales(linear), "tpu")
    gemm = load_task("jaxbench:8p_GEMM")
    with pytest.raises(Unsupported):
        retention.propose(gemm, trace_scales(gemm.with_scales({"ci": gemm.scale("ci")})), "tpu")
