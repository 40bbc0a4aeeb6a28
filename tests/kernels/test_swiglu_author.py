"""The offline author's gated-MLP recogniser: 9p is bound to mk.kernels.swiglu in a standalone file that passes the
static check and matches the reference at other sizes; non-elementwise gates and other products are declined."""

import dataclasses

import jax
import jax.numpy as jnp
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
