"""The ragged paged-attention recogniser (mk.author.ragged_paged): 7p is bound to mk.kernels.ragged_paged_attention
in a standalone file that matches the reference on scattered pages and random kv_lens, at the authoring scale and
at the held-out layout it never saw; paged decode attention (two page inputs) and plain attention are declined."""

import jax
import numpy as np
import pytest

from mk.author import OfflineAuthor, ragged_paged
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
    task = _ci("7p_Ragged_Paged_Attention")
    prop = ragged_paged.propose(task, trace_scales(task), target)
    assert prop.template == "ragged_paged" and "from mk" not in prop.source
    assert f"def ragged_paged_attention_{target}(" in prop.source and "scale = (head_dim ** -0.5)" in prop.source
    assert "ACTIVE_Q_LENS" not in prop.source
    assert check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    base = load_task("jaxbench:7p_Ragged_Paged_Attention")
    full = base.with_scales({"ci": base.scale("ci"), **{h.name: h for h in base.heldout}})
    for scale in ("ci", "heldout"):  # seeds other than 0: scattered pages, random kv_lens
        xs = full.make_inputs(scale, seed, "normal")
        want = np.asarray(jax.jit(full.bind(full.reference, scale))(*xs), np.float32)
        fn = full.bind(lambda *a: ns["kernel"](*a), scale)
        with get_target(target).execution():
            got = np.asarray(jax.jit(fn)(*xs), np.float32)
        np.testing.assert_allclose(got, want, atol=1e-2, rtol=1e-2)
    get_target(target).lower(task.bind(lambda *a: ns["kernel"](*a), "ci"), *task.arg_structs("ci"))


def test_declines_what_is_not_ragged_paged():
    for name, match in (("6p_Paged_Attention", "one rank-4 combined"), ("2p_GQA_Attention", "rank-3 query")):
        task = _ci(name)
        with pytest.raises(Unsupported, match=match):
            ragged_paged.propose(task, trace_scales(task), "tpu")
    assert [p.template for p in OfflineAuthor().propose(_ci("7p_Ragged_Paged_Attention"), "tpu").proposals] \
        == ["ragged_paged"]
