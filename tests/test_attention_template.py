"""Flash-attention template: recognised from the jaxpr, correct in interpret mode, lowers for TPU and GPU (Triton)."""

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
CAUSAL_TASKS = [(str(EXAMPLES / "attention.py"), False), ("jaxbench:1p_Flash_Attention", False),
                ("jaxbench:2p_GQA_Attention", True)]


def _ci(spec):
    task = load_task(spec)
    return task.with_scales({"ci": task.scale("ci")})


def _load(source):
    ns = {}
    exec(compile(source, "candidate", "exec"), ns)
    return ns


def _run(task, ns, target, xs, **config):
    with get_target(target).execution():
        return np.asarray(jax.jit(task.bind(lambda *a: ns["kernel"](*a, **config), "ci"))(*xs), np.float32)


def _check(task, source, target="tpu", configs=({},)):
    ns = _load(source)
    xs = task.make_inputs("ci", 3, "normal")
    ref = np.asarray(task.bind(task.reference, "ci")(*xs), np.float32)
    atol, rtol = task.tolerance.for_output(0)
    for config in configs:
        np.testing.assert_allclose(_run(task, ns, target, xs, **config), ref, atol=atol, rtol=rtol, err_msg=str(config))
        get_target(target).lower(task.bind(lambda *a: ns["kernel"](*a, **config), "ci"), *task.arg_structs("ci"))


@pytest.mark.parametrize("spec,gqa", CAUSAL_TASKS)
def test_causal_attention_matches_and_lowers(spec, gqa):
    task = _ci(spec)
    props = [p for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "attention"]
    assert [p.name for p in props] == ["flash-attention-tpu", "flash-attention-tpu-resident"]
    for prop in props:  # both block schedules
        assert "CAUSAL = True" in prop.source and ("GQA" in prop.rationale) == gqa
        _check(task, prop.source)


@pytest.mark.parametrize("spec,gqa", CAUSAL_TASKS)
def test_gpu_causal_attention_matches_and_lowers(spec, gqa):
    task = _ci(spec)
    props = [p for p in OfflineAuthor().propose(task, "gpu").proposals if p.template == "attention"]
    assert [p.name for p in props] == ["flash-attention-gpu", "flash-attention-gpu-resident"]
    assert len({p.rationale for p in props}) == 2 and "two passes" in props[1].rationale
    for prop in props:  # both block schedules
        assert "pltriton.CompilerParams" in prop.source and "scratch_shapes" not in prop.source
        assert "CAUSAL = True" in prop.source and ("GQA" in prop.rationale) == gqa
        space = _load(prop.source)["CONFIG_SPACE"]
        assert set(space) >= {"block_q", "block_k"} and all(b & (b - 1) == 0 and b >= 16 for b in space["block_q"] + space["block_k"])
        # the default, and several key blocks per query block with the diagonal crossing blocks unevenly
        _check(task, prop.source, "gpu", ({}, {"block_q": 32, "block_k": 64, "num_warps": 8}, {"block_q": 64, "block_k": 16}))


@pytest.mark.parametrize("variant", [0, 1])
def test_gpu_causal_skips_key_blocks_past_the_diagonal(variant):
    """NaN keys/values past the first half must not reach queries of the first half: those blocks are never loaded."""
    task = _ci(str(EXAMPLES / "attention.py"))
    ns = _load(attention.propose(task, trace_scales(task), "gpu")[variant].source)
    xs = [np.asarray(x) for x in task.make_inputs("ci", 5, "normal")]
    clean = _run(task, ns, "gpu", xs, block_q=32, block_k=64)
    half = xs[0].shape[2] // 2
    for i in (1, 2):
        xs[i] = xs[i].copy()
        xs[i][:, :, half:] = np.nan
    poisoned = _run(task, ns, "gpu", xs, block_q=32, block_k=64)
    np.testing.assert_array_equal(poisoned[:, :, :half], clean[:, :, :half])
    assert np.isnan(poisoned[:, :, half:]).all()


def _plain(q, k, v):  # (B, S, H, D), no mask, explicit scale
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * 0.25
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def _plain_task(S=256, D=64):
    args = tuple(ArgSpec(n, ("B", "S", "H", "D"), "float32", Init("normal")) for n in "qkv")
    return Task("plain_attn", _plain, args, {"ci": Scale("ci", {"B": 1, "S": S, "H": 2, "D": D})},
                tolerance=Tolerance(1e-3, 1e-3))


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_non_causal_other_layout(target):
    task = _plain_task()
    pat = attention.recognise(__import__("mk.author.ir", fromlist=["from_jaxpr"]).from_jaxpr(trace_scales(task)[0].jaxpr))
    assert pat.layout == (0, 2, 1, 3) and pat.scale == 0.25 and pat.group == 1
    for prop in attention.propose(task, trace_scales(task), target):
        assert "CAUSAL = False" in prop.source and "scale = 0.25" in prop.source
        _check(task, prop.source, target, ({},) if target == "tpu" else ({}, {"block_q": 32, "block_k": 128}))


@pytest.mark.parametrize("S,D", [(256, 48), (200, 64), (48, 64)])
def test_gpu_pads_shapes_triton_cannot_block(S, D):
    """Triton needs power-of-two blocks: a head_dim or a sequence no power of two >= 16 divides is zero-padded
    (padded keys masked) rather than declined, and the result still matches."""
    task = _plain_task(S=S, D=D)
    prop = attention.propose(task, trace_scales(task), "gpu")[0]
    _check(task, prop.source, "gpu", ({}, {"block_q": 32, "block_k": 16}))
    assert attention.propose(task, trace_scales(task), "tpu")[0].template == "attention"


def test_a_callable_with_concrete_shapes_gets_flash_attention():
    """mk.optimize's task for examples/attention.py (concrete shapes, no named dims): the probes move v's head dim
    on its own, which the reference allows; the template used to decline ("k and v differ in shape") while
    `mk optimize examples/attention.py` wrote the kernel. The kernel takes a value head size of its own."""
    from mk.loaders.callable import task_from_callable

    fn = load_task(str(EXAMPLES / "attention.py")).reference
    shape = ((1, 2, 128, 64), "bfloat16")
    task = task_from_callable(fn, scales={"ci": [shape] * 3}, name="attention")
    props = [p for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "attention"]
    assert props and "CAUSAL = True" in props[0].source
    _check(task, props[0].source)
    wide_v = task_from_callable(fn, scales={"ci": [shape, shape, ((1, 2, 128, 32), "bfloat16")]}, name="attention")
    _check(wide_v, props[0].source)


def test_declines_without_a_softmax_between_two_products():
    def f(q, k, v):
        return jnp.einsum("bhqk,bhkd->bhqd", jnp.einsum("bhqd,bhkd->bhqk", q, k), v)

    args = tuple(ArgSpec(n, ("B", "H", "S", "D"), "float32") for n in "qkv")
    task = Task("bilinear", f, args, {"ci": Scale("ci", {"B": 1, "H": 2, "S": 128, "D": 64})})
    for target in ("tpu", "gpu"):
        with pytest.raises(Unsupported, match="softmax"):
            attention.propose(task, trace_scales(task), target)
    with pytest.raises(Unsupported, match="not 'cpu'"):
        attention.propose(task, trace_scales(task), "cpu")


def _masked_task(name, mask_fn, S=128):
    def f(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125
        s = jnp.where(mask_fn(jnp.arange(S)[:, None], jnp.arange(S)[None, :]), s, -1e30)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    args = tuple(ArgSpec(n, ("B", "H", "S", "D"), "float32", Init("normal")) for n in "qkv")
    return Task(name, f, args, {"ci": Scale("ci", {"B": 1, "H": 2, "S": S, "D": 64})})


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_declines_scores_that_are_not_plain_causal_or_full(target):
    """An additive score bias (5p), a sliding window or a block-sparse mask is neither semantics the kernel has (the
    score-bias recogniser and the attention-core recogniser's score modification write those)."""
    flex = _ci("jaxbench:5p_Flex_Attention")
    assert "the scores pass through add" in OfflineAuthor().propose(flex, target).declined["attention"]
    reasons = []
    for name, mask in (("window", lambda i, j: (j <= i) & (j > i - 32)), ("blocks", lambda i, j: i // 32 == j // 32)):
        task = _masked_task(name, mask)
        with pytest.raises(Unsupported) as err:
            attention.propose(task, trace_scales(task), target)
        reasons.append(str(err.value))
    for reason in reasons:
        assert "neither full nor causal" in reason and "does not implement" in reason
    # the same construction with a plain causal mask is still proposed
    causal = _masked_task("causal", lambda i, j: j <= i)
    assert "CAUSAL = True" in attention.propose(causal, trace_scales(causal), target)[0].source


def test_bf16_scores_are_rounded_as_the_reference_rounds_them():
    """4p: unscaled bf16 scores (q pre-scaled) are rounded to bf16 by the reference; the kernel mirrors that."""
    task = _ci("jaxbench:4p_Sparse_Attention")
    prop = next(p for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "attention")
    assert "CAUSAL = True" in prop.source and "SCORE_DTYPE = jnp.bfloat16" in prop.source and "GQA" in prop.rationale
    _check(task, prop.source)
    assert "SCORE_DTYPE = None" in attention.propose(_plain_task(), trace_scales(_plain_task()), "tpu")[0].source
