"""The attention-core recogniser (mk.author.mla): 3p's multi-head latent attention keeps RoPE and the reshapes as
plain JAX written back from the jaxpr, runs its six x @ w projections as Pallas matmuls (mk.kernels.gmm, one group)
and fuses the causal core (value head_dim != query/key head_dim) with mk.kernels.flash_attention, both schedules,
standalone and right on both targets; plain attention on inputs is left to the attention template, and a core whose
scores carry something else is declined. (tests/kernels/test_mla_registered.py: the registered template on a tiny
MLA, with the judge's rule 15 checked in-process.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import mla
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
    want = np.asarray(jax.jit(task.bind(task.reference, "ci"))(*xs), np.float32)
    fn = task.bind(lambda *a: ns["kernel"](*a), "ci")
    with get_target(target).execution():
        got = np.asarray(jax.jit(fn)(*xs), np.float32)
    atol, rtol = task.tolerance.for_output(0)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=prop.name)
    get_target(target).lower(fn, *task.arg_structs("ci"))


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_mla_core_fused_projections_as_matmuls(target):
    task = _ci("3p_MLA_Attention")
    props = mla.propose(task, trace_scales(task), target)
    assert [p.name for p in props] == [f"attention-core-{target}", f"attention-core-{target}-resident"]
    for prop in props:
        assert "CAUSAL = True" in prop.source and "lax.concatenate" in prop.source and prop.source.count("pallas_call(") >= 2
        assert prop.source.count("= _matmul(") == 6  # every projection in Pallas, RoPE and reshapes in plain JAX
        _check(task, prop, target)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_written_at_ci_traces_at_full(target):
    """Written at ci (full compile-only, as ``--scale ci`` leaves it), the program reads the head count and head dims
    from its static arguments: it traces at 3p's full size (128 heads of 192) where the ci numbers (4 heads of 48)
    once were baked in and the reshape failed."""
    task = load_task("jaxbench:3p_MLA_Attention").only_scale("ci")
    prop = mla.propose(task, trace_scales(task), target)[0]
    assert "num_heads" in prop.source.split("def kernel(")[1].split("\n", 1)[1]
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    full = load_task("jaxbench:3p_MLA_Attention")
    want = jax.eval_shape(full.bind(full.reference, "full"), *full.arg_structs("full"))
    got = jax.eval_shape(full.bind(lambda *a: ns["kernel"](*a), "full"), *full.arg_structs("full"))
    assert got.shape == want.shape == (4, 2048, 7168) and got.dtype == want.dtype


def _qkv_proj(x, wq, wk, wv):  # attention on computed q/k/v, full, (B, S, H, D) after a reshape
    b, s, e = x.shape
    q, k, v = ((x @ w).reshape(b, s, 2, -1) for w in (wq, wk, wv))
    p = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.125, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, -1)


def _proj_task(fn=_qkv_proj):
    args = (ArgSpec("x", ("B", "S", "E"), "float32", Init("normal")),) + tuple(
        ArgSpec(n, ("E", "F"), "float32", Init("normal", std=0.1)) for n in ("wq", "wk", "wv"))
    return Task("proj_attn", fn, args, {"ci": Scale("ci", {"B": 2, "S": 64, "E": 32, "F": 128})},
                tolerance=Tolerance(1e-3, 1e-3))


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_full_attention_on_projections(target):
    task = _proj_task()
    for prop in mla.propose(task, trace_scales(task), target):
        assert "CAUSAL = False" in prop.source
        _check(task, prop, target)


def test_declines_plain_attention_and_writes_other_scores():
    plain = _ci("2p_GQA_Attention")
    with pytest.raises(Unsupported, match="attention template"):
        mla.propose(plain, trace_scales(plain), "tpu")

    def capped(x, wq, wk, wv):  # a soft cap on the scores: neither full nor causal softmax attention
        b, s, e = x.shape
        q, k, v = ((x @ w).reshape(b, s, 2, -1) for w in (wq, wk, wv))
        p = jax.nn.softmax(30 * jnp.tanh(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 30), axis=-1)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, -1)

    task = _proj_task(capped)  # the cap is the reference's own score modification, applied to each score tile
    src = mla.propose(task, trace_scales(task), "gpu")[0].source
    assert "jnp.tanh(" in src and "mod=_score_mod" in src and "CAUSAL = False" in src

    def centred(x, wq, wk, wv):  # a row mean taken off the scores: not elementwise, declined
        b, s, e = x.shape
        q, k, v = ((x @ w).reshape(b, s, 2, -1) for w in (wq, wk, wv))
        sc = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        p = jax.nn.softmax(sc - sc.mean(axis=-1, keepdims=True), axis=-1)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, -1)

    task = _proj_task(centred)
    with pytest.raises(Unsupported, match="not elementwise"):
        mla.propose(task, trace_scales(task), "gpu")
