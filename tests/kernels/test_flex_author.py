"""The score-bias attention recogniser (mk.author.flex): 5p's causal attention with a dense per-head bias and a
non-causal one with a broadcast (S, S) bias in another layout are bound to mk.kernels.flash_attention (both block
schedules) in standalone files that match the reference; attention without a bias, or with a bias from q, is declined."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import OfflineAuthor, flex
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.harness.static import check_source
from mk.loaders import load_task
from mk.task import ArgSpec, Init, Scale, Task, Tolerance
from mk.targets import get_target


def _ci(name):
    task = load_task(f"jaxbench:{name}")
    return task.with_scales({"ci": task.scale("ci")})


def _check(task, prop, target, seed=3):
    assert "from mk" not in prop.source and check_source(prop.source, target=target, require_pallas=True).ok
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    xs = task.make_inputs("ci", seed, "normal")
    want = np.asarray(task.bind(task.reference, "ci")(*xs), np.float32)
    fn = task.bind(lambda *a: ns["kernel"](*a), "ci")
    with get_target(target).execution():
        got = np.asarray(jax.jit(fn)(*xs), np.float32)
    atol, rtol = task.tolerance.for_output(0)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=prop.name)
    get_target(target).lower(fn, *task.arg_structs("ci"))


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_flex_attention_both_schedules(target):
    task = _ci("5p_Flex_Attention")
    props = flex.propose(task, trace_scales(task), target)
    assert [p.name for p in props] == [f"flex-attention-{target}", f"flex-attention-{target}-resident"]
    for prop in props:
        assert "CAUSAL = True" in prop.source and "SCORE_DTYPE = jnp.bfloat16" in prop.source
        assert "lax.expand_dims(bias, (0,))" in prop.source and "rel_pos_bias" in prop.rationale
        _check(task, prop, target)
    assert "flex_attention" in [p.template for p in OfflineAuthor().propose(task, target).proposals]


def _biased(q, k, v, table):  # (B, S, H, D) layout, full attention, an (S, S) bias shared by batch and heads
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.125 + table
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def _biased_task(fn=_biased):
    args = tuple(ArgSpec(n, ("B", "S", "H", "D"), "float32", Init("normal")) for n in "qkv") + (
        ArgSpec("table", ("S", "S"), "float32", Init("normal")),)
    return Task("biased_attn", fn, args, {"ci": Scale("ci", {"B": 2, "S": 128, "H": 2, "D": 64})},
                tolerance=Tolerance(1e-3, 1e-3))


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_broadcast_bias_other_layout(target):
    task = _biased_task()
    props = flex.propose(task, trace_scales(task), target)
    for prop in props:
        assert "CAUSAL = False" in prop.source and "SCORE_DTYPE = None" in prop.source
        _check(task, prop, target)


def test_declines_without_an_input_bias():
    plain = _ci("1p_Flash_Attention")
    with pytest.raises(Unsupported, match="no additive score bias"):
        flex.propose(plain, trace_scales(plain), "tpu")

    def from_q(q, k, v, table):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.125 + jnp.sum(q, axis=-1)[:, None, :, :1].transpose(0, 3, 1, 2)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v) + 0 * table[0, 0]

    task = _biased_task(from_q)
    with pytest.raises(Unsupported):
        flex.propose(task, trace_scales(task), "gpu")
