"""Flash-attention template: recognised from the jaxpr, correct in interpret mode, lowers for TPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import OfflineAuthor, attention
from mk.author.emit import Unsupported
from mk.author.trace import trace_scales
from mk.loaders import load_task
from mk.task import ArgSpec, Init, Scale, Task, Tolerance
from mk.targets import get_target

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def _ci(spec):
    task = load_task(spec)
    return task.with_scales({"ci": task.scale("ci")})


def _check(task, source):
    ns = {}
    exec(compile(source, "candidate", "exec"), ns)
    xs = task.make_inputs("ci", 3, "normal")
    with get_target("tpu").execution():
        out = jax.jit(task.bind(lambda *a: ns["kernel"](*a), "ci"))(*xs)
    ref = task.bind(task.reference, "ci")(*xs)
    atol, rtol = task.tolerance.for_output(0)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), atol=atol, rtol=rtol)
    get_target("tpu").lower(task.bind(ns["kernel"], "ci"), *task.arg_structs("ci"))


@pytest.mark.parametrize("spec,gqa", [(str(EXAMPLES / "attention.py"), False), ("jaxbench:1p_Flash_Attention", False),
                                      ("jaxbench:2p_GQA_Attention", True)])
def test_causal_attention_matches_and_lowers(spec, gqa):
    task = _ci(spec)
    prop = next(p for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "attention")
    assert "CAUSAL = True" in prop.source and ("GQA" in prop.rationale) == gqa
    _check(task, prop.source)


def _plain(q, k, v):  # (B, S, H, D), no mask, explicit scale
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.25
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def test_non_causal_other_layout():
    args = tuple(ArgSpec(n, ("B", "S", "H", "D"), "float32", Init("normal")) for n in "qkv")
    task = Task("plain_attn", _plain, args, {"ci": Scale("ci", {"B": 1, "S": 256, "H": 2, "D": 64})},
                tolerance=Tolerance(1e-3, 1e-3))
    pat = attention.recognise(__import__("mk.author.ir", fromlist=["from_jaxpr"]).from_jaxpr(trace_scales(task)[0].jaxpr))
    assert pat.layout == (0, 2, 1, 3) and pat.scale == 0.25 and pat.group == 1
    prop = attention.propose(task, trace_scales(task), "tpu")
    assert "CAUSAL = False" in prop.source and "scale = 0.25" in prop.source
    _check(task, prop.source)


def test_declines_without_a_softmax_between_two_products():
    def f(q, k, v):
        return jnp.einsum("bhqk,bhkd->bhqd", jnp.einsum("bhqd,bhkd->bhqk", q, k), v)

    args = tuple(ArgSpec(n, ("B", "H", "S", "D"), "float32") for n in "qkv")
    task = Task("bilinear", f, args, {"ci": Scale("ci", {"B": 1, "H": 2, "S": 128, "D": 64})})
    with pytest.raises(Unsupported, match="softmax"):
        attention.propose(task, trace_scales(task), "tpu")
    with pytest.raises(Unsupported, match="TPU"):
        attention.propose(task, trace_scales(task), "gpu")
