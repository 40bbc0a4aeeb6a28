"""Each sub-agent alone on an example task, offline with DummyLM: validated typed outputs, and retries."""

from __future__ import annotations


import dspy
import jax.numpy as jnp
import pytest
from lm_fakes import fresh_dspy
from dspy.utils.dummies import DummyLM

from mk.errors import AgentOutputError
from mk.lm import Accountant, accounted
from mk.programs import (CompileFixer, Implementation, Implementer, Planner, ProfileAnalyst, TestSynthesizer,
                         TuningSpaceProposer)
from mk.programs.validation import InvalidOutput, check_code, check_config_space
from mk.signatures import Plan, ProfileAnalysis, TestCase
from mk.task import ArgSpec, Scale, Task


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)


def rmsnorm(x, w):
    return x * jnp.reciprocal(jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)) * w


@pytest.fixture
def task():
    return Task(
        name="rmsnorm",
        reference=rmsnorm,
        args=(ArgSpec("x", ("rows", "cols"), "float32"), ArgSpec("w", ("cols",), "float32")),
        scales={"full": Scale("full", {"rows": 4096, "cols": 1024}), "ci": Scale("ci", {"rows": 8, "cols": 128})},
    )


def run(program, answers, **inputs):
    """Run ``program`` on scripted answers; return (prediction, accountant, the DummyLM)."""
    lm = DummyLM(answers)
    accountant = Accountant(run_id="r1")
    with dspy.context(lm=accounted(lm, accountant)):
        return program(**inputs), accountant, lm


def last_prompt(lm) -> str:
    return lm.history[-1]["messages"][-1]["content"]


PLAN = {"approach": "pallas", "strategy": "Fuse the mean of squares and the scaling into one row-wise kernel.",
        "tiling": {"block_rows": 256}, "memory_placement": "a block of rows and w in VMEM",
        "pipelining": "grid over row blocks, double-buffered", "expected_speedup": 1.6, "risks": ["bf16 accuracy"]}

KERNEL = '''
import jax
import jax.numpy as jnp


def kernel(x, w, *, block_rows=256):
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(ms + 1e-6) * w
'''


def test_planner_returns_a_validated_plan_and_is_accounted(task):
    out, accountant, lm = run(Planner(), [{"plan": PLAN}], task_analysis="RMSNorm over rows", hardware="TPU v5e",
                              feedback="", history="")
    assert isinstance(out.plan, Plan) and out.plan.tiling == {"block_rows": 256}
    (call,) = accountant.calls
    assert (call.agent, call.run_id, call.cache_hit, call.error) == ("planner", "r1", False, None)


def test_planner_retries_with_the_validation_error(task):
    bad = dict(PLAN, expected_speedup=1000.0)
    out, accountant, lm = run(Planner(), [{"plan": bad}, {"plan": PLAN}], task_analysis="a", hardware="b")
    assert out.plan.expected_speedup == pytest.approx(1.6)
    assert len(accountant.calls) == 2
    assert "not credible" in last_prompt(lm)  # the rejection was fed back as previous_error


def test_implementer_returns_code_and_config_space(task):
    out, _, _ = run(Implementer(), [{"code": f"```python\n{KERNEL}\n```", "config_space": {"block_rows": [128, 256]}}],
                    task_analysis="rmsnorm", plan=Plan(**PLAN), hardware="TPU", task=task)
    impl = out.implementation
    assert isinstance(impl, Implementation) and impl.entry == "kernel"
    assert impl.config_space == {"block_rows": [128, 256]}
    assert "```" not in impl.code and "CONFIG_SPACE = {'block_rows': [128, 256]}" in impl.code
    compile(impl.code, "<candidate>", "exec")


def test_implementer_retries_code_without_kernel(task):
    no_kernel = "import jax\n\ndef rms(x, w):\n    return x\n"
    out, _, lm = run(Implementer(), [{"code": no_kernel, "config_space": {}},
                                     {"code": KERNEL, "config_space": {}}],
                     task_analysis="rmsnorm", plan=Plan(**PLAN), hardware="TPU", task=task)
    assert out.implementation.entry == "kernel" and out.implementation.config_space == {}
    assert "no `kernel` function" in last_prompt(lm)


def test_implementer_gives_up_with_a_typed_error(task):
    wrong_arity = "def kernel(x):\n    return x\n"
    answers = [{"code": wrong_arity, "config_space": {}}] * 2
    with pytest.raises(AgentOutputError) as info:
        run(Implementer(attempts=2), answers, task_analysis="r", plan=Plan(**PLAN), hardware="TPU", task=task)
    assert info.value.metadata["attempts"] == 2 and "2 positional" in info.value.metadata["errors"][-1]


def test_compile_fixer_rejects_an_unchanged_answer(task):
    broken = KERNEL.replace("block_rows=256", "block_rows=300")
    out, _, lm = run(CompileFixer(), [{"fixed_code": broken, "explanation": "none"},
                                      {"fixed_code": KERNEL, "explanation": "300 does not divide 4096; use 256"}],
                     error="ValueError: block shape (300, 1024) does not divide (4096, 1024)", code=broken, task=task)
    assert out.implementation.code.strip() == KERNEL.strip() and "256" in out.explanation
    assert "identical to the failing code" in last_prompt(lm)


def _case(name, shapes, dtypes=("float32", "float32"), **kw):
    return {"name": name, "shapes": shapes, "dtypes": list(dtypes), **kw}


def test_test_synthesizer_returns_cases_that_fit(task):
    cases = [_case("ragged", [[7, 130], [130]], distribution="wide"),
             _case("zeros", [[8, 128], [128]], edge_case="zeros")]
    out, accountant, _ = run(TestSynthesizer(), [{"test_cases": cases}], task=task, analysis="memory-bound norm")
    assert [c.name for c in out.test_cases] == ["ragged", "zeros"]
    assert all(isinstance(c, TestCase) for c in out.test_cases)
    assert accountant.calls[0].agent == "test_synthesizer"


@pytest.mark.parametrize("bad, reason", [
    (_case("rank", [[8], [128]]), "rank 2"),
    (_case("dtype", [[8, 128], [128]], dtypes=("bfloat16", "float32")), "dtype float32"),
    (_case("empty", [[0, 128], [128]]), "between 1 and"),
    (_case("huge", [[65536, 65536], [65536]]), "elements"),
    (_case("mismatch", [[8, 128], [64]]), "reference rejects"),
])
def test_test_synthesizer_retries_cases_that_do_not_fit(task, bad, reason):
    good = [_case("ok", [[16, 256], [256]])]
    out, _, lm = run(TestSynthesizer(), [{"test_cases": [bad]}, {"test_cases": good}], task=task)
    assert [c.name for c in out.test_cases] == ["ok"]
    assert reason in last_prompt(lm)


def test_tuning_space_proposer_keeps_spaces_small_and_real(task):
    code = KERNEL
    too_big = {"block_rows": list(range(1, 40)), "unused": [1, 2]}
    out, _, lm = run(TuningSpaceProposer(max_configs=64),
                     [{"config_space": too_big, "rationale": "all"},
                      {"config_space": {"block_rows": [64, 128, 256, 512]}, "rationale": "divides 4096"}],
                     code=code, task_analysis="rmsnorm", hardware="TPU")
    assert out.config_space == {"block_rows": [64, 128, 256, 512]}
    assert "configurations" in last_prompt(lm)


def test_profile_analyst_needs_a_next_step_to_continue(task):
    vague = {"bottleneck": "memory", "evidence": "HBM at 80% of peak", "next_step": "", "decision": "continue",
             "expected_gain": 1.1}
    fixed = dict(vague, next_step="fuse the weight multiply into the load of the next op")
    out, _, lm = run(ProfileAnalyst(), [{"analysis": vague}, {"analysis": fixed}],
                     profile={"time_ms": 0.8, "hbm_fraction": 0.8, "flops_fraction": 0.05},
                     task_analysis="rmsnorm", hardware="TPU v5e")
    assert isinstance(out.analysis, ProfileAnalysis) and out.analysis.next_step.startswith("fuse")
    assert "next_step is empty" in last_prompt(lm)


# --- validators on their own ---------------------------------------------------------
def test_check_code_reads_config_space_from_the_code():
    impl = check_code(KERNEL + "\nCONFIG_SPACE = {'block_rows': [128, 256, 128]}\n", n_positional=2)
    assert impl.config_space == {"block_rows": [128, 256]}
    with pytest.raises(InvalidOutput, match="literal dict"):
        check_code(KERNEL + "\nCONFIG_SPACE = make_space()\n")
    with pytest.raises(InvalidOutput, match="not keyword arguments"):
        check_code(KERNEL + "\nCONFIG_SPACE = {'block_k': [1]}\n")
    with pytest.raises(InvalidOutput, match="does not parse"):
        check_code("def kernel(x, w):\n  return (x\n")
    assert check_code("workload = jax.jit(lambda x, w: x)\n").entry == "workload"


def test_check_config_space_shapes():
    assert check_config_space({"a": [1, 2], "b": ["x"]}) == {"a": [1, 2], "b": ["x"]}
    for bad in ({"a": []}, {"a": 3}, [1, 2], {"a": [float("nan")]}, {"not valid": [1]}):
        with pytest.raises(InvalidOutput):
            check_config_space(bad)
