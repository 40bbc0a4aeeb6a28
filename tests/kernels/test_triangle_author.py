"""The offline author's triangle recogniser: every product of 17p (the projections, the output projection and gate,
and the batched per-channel product) is bound to mk.kernels.gmm in a standalone file that passes the static check and
matches the reference at another size; a lone batched product is gmm's."""

import dataclasses

import jax
import numpy as np
import pytest

from mk.author import triangle
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.targets import get_target


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_written_kernel_is_standalone_and_general(target):
    task = load_task("jaxbench:17p_Triangle_Multiplication")
    ci = task.scale("ci")
    task = task.with_scales({"ci": ci})
    prop = triangle.propose(task, trace_scales(task), target)
    assert prop.template == "triangle" and "from mk" not in prop.source and f"def gmm_{target}(" in prop.source
    assert prop.source.count("= _matmul(") == 6  # four gated input projections, the output projection and gate
    assert prop.source.count("= _bmm(") == 1  # the per-channel einsum
    assert "lax.dot_general(" not in prop.source.split("def kernel(")[1]  # no product left to XLA
    assert check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    other = task.with_scales({"ci": dataclasses.replace(ci, dims={**ci.dims, "N": 40})})
    xs = other.make_inputs("ci", 1, "normal")
    want = np.asarray(other.bind(other.reference, "ci")(*xs), np.float32)
    with get_target(target).execution():
        got = np.asarray(jax.jit(other.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)


def test_declines_a_lone_batched_product():
    task = load_task("jaxbench:14p_Ragged_Dot")
    with pytest.raises(Unsupported):
        triangle.propose(task, trace_scales(task.with_scales({"ci": task.scale("ci")})), "tpu")
