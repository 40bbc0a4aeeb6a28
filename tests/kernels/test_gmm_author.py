"""The offline author's gmm recogniser: a batched matmul (14p) and a megablox-style scan over groups (11p) are bound
to mk.kernels.gmm in a standalone file that passes the static check and matches the reference at other group sizes."""

import jax
import numpy as np
import pytest

from mk.author import OfflineAuthor, gmm
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.targets import get_target


def _ci(name):
    task = load_task(f"jaxbench:{name}")
    return task.with_scales({"ci": task.scale("ci")})


@pytest.mark.parametrize("name,target,seed", [("11p_Megablox_GMM", "tpu", 3), ("14p_Ragged_Dot", "gpu", 1)])
def test_written_kernel_is_standalone_and_right(name, target, seed):
    task = _ci(name)
    prop = gmm.propose(task, trace_scales(task), target)
    assert prop.template == "gmm" and "from mk" not in prop.source and f"def gmm_{target}(" in prop.source
    assert check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    xs = task.make_inputs("ci", seed, "normal")  # 11p: seeds other than 0 draw random group sizes, empty groups too
    want = np.asarray(task.bind(task.reference, "ci")(*xs), np.float32)
    with get_target(target).execution():
        got = np.asarray(jax.jit(task.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs), np.float32)
    np.testing.assert_allclose(got, want, atol=1e-2, rtol=1e-2)


def test_declines_what_is_not_a_grouped_matmul():
    task = _ci("8p_GEMM")
    with pytest.raises(Unsupported, match="batched product|no single scan"):
        gmm.propose(task, trace_scales(task), "tpu")
    assert [p.template for p in OfflineAuthor().propose(_ci("14p_Ragged_Dot"), "tpu").proposals] == ["gmm"]
