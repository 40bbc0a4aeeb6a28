"""The paged-attention recogniser (mk.author.paged): 6p is bound to mk.kernels.paged_attention in a standalone file
that matches the reference on scattered pages and random lengths; attention without a page table is declined."""

import jax
import numpy as np
import pytest

from mk.author import OfflineAuthor, paged
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.targets import get_target


def _ci(name):
    task = load_task(f"jaxbench:{name}")
    return task.with_scales({"ci": task.scale("ci")})


@pytest.mark.parametrize("target,seed", [("tpu", 3), ("gpu", 5)])
def test_written_kernel_is_standalone_and_right(target, seed):
    task = _ci("6p_Paged_Attention")
    prop = paged.propose(task, trace_scales(task), target)
    assert prop.template == "paged" and "from mk" not in prop.source and f"def paged_attention_{target}(" in prop.source
    assert "cu_q_lens[:page_indices.shape[0]]" in prop.source and "scale = (head_dim ** -0.5)" in prop.source
    assert check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    xs = task.make_inputs("ci", seed, "normal")  # seeds other than 0: scattered pages, random lengths
    want = np.asarray(jax.jit(task.bind(task.reference, "ci"))(*xs), np.float32)
    fn = task.bind(lambda *a: ns["kernel"](*a), "ci")
    with get_target(target).execution():
        got = np.asarray(jax.jit(fn)(*xs), np.float32)
    np.testing.assert_allclose(got, want, atol=1e-2, rtol=1e-2)
    get_target(target).lower(fn, *task.arg_structs("ci"))


def test_declines_what_is_not_paged():
    task = _ci("2p_GQA_Attention")
    with pytest.raises(Unsupported, match="rank-3 query"):
        paged.propose(task, trace_scales(task), "tpu")
    assert [p.template for p in OfflineAuthor().propose(_ci("6p_Paged_Attention"), "gpu").proposals] == ["paged"]
