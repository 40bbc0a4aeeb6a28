"""Every feedback channel reaches the model and no call is wasted: LMAuthor over the real google-genai client,
talking to a local fake Gemini (tests/fake_gemini.py) that answers each sub-agent by the field it asks for."""

from __future__ import annotations

import logging

import jax.numpy as jnp
import pytest

from fake_gemini import Agents, FakeGemini
from lm_fakes import BROKEN, EXAMPLES, KERNEL, PLAN_A, STOP, fresh_dspy, gemini, prompts
from mk.candidate import Candidate
from mk.gemini import gemini_lm
from mk.harness import evaluate
from mk.harness.static import ALLOWED_IMPORT_ROOTS
from mk.hardware import get_spec
from mk.lm import Accountant, accounted
from mk.loaders import load_task
from mk.programs.auto import Auto, Context, Snapshot
from mk.programs.lm_author import (GPU_SKELETON, TPU_SKELETON, LMAuthor, _chip_rules, error_text, hardware_brief,
                                   history_text, kernels_text, plan_digest, plan_name)
from mk.signatures import FixCompileError, ImplementKernel, Plan
from mk.task import ArgSpec, Scale, Task, Tolerance


PLAN_B = {**PLAN_A, "strategy": "Use rsqrt on the row statistics and multiply by the weight broadcast over rows."}
# compiles, but the weight is ignored: the suite says incorrect
WRONG = KERNEL.replace(" * weight)", ")")
# a silent fallback: the static check rejects it before anything runs
TRY_EXCEPT = '''
import jax
import jax.numpy as jnp


def kernel(x, weight, eps):
    x32 = x.astype(jnp.float32)
    try:
        ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    except Exception:
        ms = jnp.ones_like(x32[..., :1])
    return (x32 * jax.lax.rsqrt(ms + eps) * weight).astype(x.dtype)
'''


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)


@pytest.fixture
def fake():
    with FakeGemini() as server:
        yield server


@pytest.fixture(scope="module")
def rmsnorm():
    t = load_task(str(EXAMPLES / "rmsnorm.py"))
    return t.with_scales({"ci": t.scale("ci")})


def matmul_task() -> Task:
    return Task("mm", lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype),
                (ArgSpec("x", ("M", "K"), "bfloat16"), ArgSpec("y", ("K", "N"), "bfloat16")),
                {"ci": Scale("ci", {"M": 256, "K": 1024, "N": 256})}, tolerance=Tolerance(2e-2, 2e-2))


# --- the scripted trajectory --------------------------------------------------------------------
def test_feedback_reaches_the_implementer_and_the_fixer_and_a_try_except_is_fixed(fake, rmsnorm):
    """Iteration 1: a kernel that compiles but is wrong. Iteration 2: the implementer sees it with its verdict and
    writes a try/except fallback; the static rejection goes to the fixer, whose first fix has a shape error; the
    second fix prompt has the whole error, the shapes and the first attempt; it is fixed and correct."""
    fake.route(Agents(
        plan=[{"plan": PLAN_A}, {"plan": PLAN_B}],
        code=[{"code": WRONG, "config_space": {}}, {"code": TRY_EXCEPT, "config_space": {}}],
        fixed_code=[{"fixed_code": BROKEN, "explanation": "removed the try/except; the mean is computed directly"},
                    {"fixed_code": KERNEL, "explanation": "weight has the hidden size; scale elementwise, no matmul"}],
        analysis=[{"analysis": STOP}]))
    author = LMAuthor(gemini(fake), knowledge=None, seeds=False, synthesize_tests=False)
    auto = Auto(author, target="cpu", iterations=3, tune=False)
    traj = auto.run(rmsnorm)

    assert [s.status for s in traj.snapshots] == ["incorrect", "correct"], [s.summary() for s in traj.snapshots]
    best = traj.best
    assert best.source.strip() == KERNEL.strip() and "analyst decided to stop" in traj.stop_reason
    assert [s.asked for s in fake.seen] == ["plan", "code", "plan", "code", "fixed_code", "fixed_code", "analysis"]

    first, second = traj.snapshots
    # plans are named by their content, never by a counter
    assert first.proposal == plan_name(Plan(**PLAN_A)) and second.proposal == plan_name(Plan(**PLAN_B))
    # the implementer's second prompt holds the first kernel's code and its verdict and reason
    impl = prompts(fake, "code")[1]
    assert WRONG.strip().splitlines()[-1].strip() in impl and "verdict incorrect" in impl and first.reason[:60] in impl
    # the planner's second prompt: the history names the plan by content, and nothing is said twice
    plan2 = prompts(fake, "plan")[1]
    assert first.proposal in plan2 and "lm-jax" not in plan2 and PLAN_A["strategy"] in plan2
    assert plan2.count(first.reason[:80]) == 1 and plan2.count(first.summary()) == 1  # once: in the history

    fix1, fix2 = prompts(fake, "fixed_code")
    # the static-check rejection reached the fixer, with the line it points at, the shapes, the hardware and the plan
    assert "try/except" in fix1 and "> " in fix1 and "try:" in fix1 and "shapes ci=[2, 64, 256]" in fix1
    assert "target cpu" in fix1 and PLAN_B["strategy"] in fix1
    # the second fix: the whole error (the shapes that explain it), the candidate's own line, the earlier attempt
    assert "dot_general requires contracting dimensions to have the same shape, got (256,) and (3,)" in fix2
    assert "weight[:3]" in fix2 and "fix attempt 1" in fix2 and "removed the try/except" in fix2
    assert "do not repeat a failed fix" in fix2
    assert "(fixed: weight has the hidden size" in best.rationale


def test_fixer_error_text_keeps_both_ends_and_the_candidates_lines():
    long = "candidate failed the tpu compile check: TypeError: " + "x" * 12000 + " got shapes (4096, 300) and (300, 1024)"
    text = error_text(long + " (candidate.py line 3: y = x @ w)", "import jax\n\ny = x @ w\n")
    assert "(4096, 300) and (300, 1024)" in text and len(text) < 8200 and ">    3 | y = x @ w" in text
    assert text.startswith("candidate failed the tpu compile check")


MULTILINE = r"""
import jax
import jax.numpy as jnp


def _check(x):
    raise ValueError("block shape mismatch\n  operand 0: f32[8,100]\n  block: (8, 128) needs a multiple of 128 on the last axis\nsee the BlockSpec")


def kernel(x):
    _check(x)
    return x
"""


def test_the_whole_multiline_error_and_the_candidates_frames_reach_the_fixer(tmp_path, monkeypatch):
    """The verdict's reason is one line; the fixer gets the whole message (the middle line that explains it) and
    the candidate's own traceback lines, innermost last."""
    from mk.candidate import Candidate
    from mk.harness.evaluate import evaluate
    from mk.harness.results import WHOLE_ERROR
    from mk.task import ArgSpec, Scale, Task

    monkeypatch.setenv("MK_HOME", str(tmp_path))
    task = Task("ident", lambda x: x * 2.0, (ArgSpec("x", (8, 100), "float32"),), {"ci": Scale("ci")})
    res = evaluate(task, Candidate.from_source(MULTILINE), target="cpu", require_pallas=False, measure=False)
    assert res.status == "compile_error" and "\n" not in res.reason
    assert "block: (8, 128) needs a multiple of 128 on the last axis" in res.error
    assert "candidate.py line 7, in _check" in res.error and "in kernel: _check(x)" in res.error
    text = res.fix_text()
    assert text.startswith(res.reason) and WHOLE_ERROR in text and "operand 0: f32[8,100]" in text
    fixer = error_text(text, MULTILINE)
    assert "needs a multiple of 128" in fixer and ">    7 |" in fixer


def test_history_and_kernels_text():
    ok = Snapshot(1, "jax-fuse-abc123", "[jax] fuse the pass", KERNEL, {"block_rows": 8}, "correct", "all pass", 1.7, None)
    bad = Snapshot(2, "pallas-tile-def456", "[pallas] tile rows", BROKEN, {}, "compile_error", "TypeError: shapes (3,)", None,
                   None, failed_phase="validate", feedback="should not be repeated")
    hist = history_text([ok, bad])
    assert "iteration 2 (pallas-tile-def456): compile_error; failed in validate" in hist and "plan: [pallas] tile rows" in hist
    assert "should not be repeated" not in hist  # the analyst's reading goes to feedback, once
    kern = kernels_text([ok, bad])
    assert "best kernel so far: iteration 1 (jax-fuse-abc123): speedup 1.70x" in kern and "weight[:3]" in kern
    assert "latest failing kernel: iteration 2" in kern and "verdict compile_error" in kern
    assert kernels_text([]) == ""
    ctx = Context(None, "cpu", [ok, bad], bad.summary())
    assert LMAuthor.feedback_text(ctx) == "reading of iteration 2: should not be repeated"


def test_the_implementer_sees_its_own_latest_kernel_when_it_is_neither_the_best_nor_failing():
    """Issue 23 item 6: a correct attempt that is not the best was never shown again (the seed was the best), so a
    later prompt could not build on the model's own kernel. Off the device its speed is the estimate, labelled."""
    from mk.harness.results import EvalResult, SpeedEstimate

    seed = Snapshot(1, "rowwise-tpu", "[pallas] the template", KERNEL, {}, "correct", "all pass", None, None)
    est = SpeedEstimate(chip="v6e", scale="full", kernel_s=2e-4, kernel_bound="memory", baseline_s=1e-4,
                        baseline_bound="memory", estimated_speedup=0.5, model="a test model", judged=False)
    mine = Snapshot(2, "lm-two-pass", "[pallas] two passes", KERNEL.replace("jnp.square", "jnp.abs"), {"block_rows": 16},
                    "correct", "all pass", None, EvalResult(status="correct", reason="ok", task="t", target="tpu", estimate=est))
    kern = kernels_text([seed, mine])
    assert "best kernel so far: iteration 1 (rowwise-tpu): correct, speed not measured here" in kern
    assert ("your latest kernel: iteration 2 (lm-two-pass): estimated 0.50x over XLA on v6e at full (compiled there, "
            "not judged there) (an estimate, not a measurement), config {'block_rows': 16}") in kern and "jnp.abs" in kern
    assert "your latest kernel" not in kernels_text([seed])  # the best is not shown twice
    bad = Snapshot(3, "lm-broken", "[pallas] x", BROKEN, {}, "compile_error", "TypeError", None, None)
    assert "your latest kernel" not in kernels_text([seed, bad])  # the latest failing one is shown as such


# --- the contract and the hardware brief ------------------------------------------------------------
def test_the_contract_is_in_the_implementer_and_fixer_instructions():
    for sig in (ImplementKernel, FixCompileError):
        text = sig.instructions
        for rule in ("try/except", "global", "module-level state", "pallas_call", "CONFIG_SPACE", "every suite shape",
                     "trace time", "jax._src"):
            assert rule in text, (sig.__name__, rule)
        assert all(m in text for m in ALLOWED_IMPORT_ROOTS)  # the static check's allow-list, not a copy that drifts


def test_hardware_brief_has_scoped_vmem_packing_and_a_skeleton():
    tpu = hardware_brief("tpu")  # the assumed chip, v6e
    assert "scoped VMEM: a kernel gets 32 MiB by default of the 128 MiB physical" in tpu
    assert "bfloat16 (16, 128)" in tpu and "int8 (32, 128)" in tpu and "dimension_semantics" in tpu
    assert "pltpu.VMEM((bm, bn), jnp.float32)" in tpu and "pl.when" in tpu and "pl.BlockSpec" in tpu
    v5p = " ".join(_chip_rules(get_spec("v5p")))
    assert "16 MiB by default" in v5p and "megacore" in v5p
    assert "XLA tiles 16-bit arrays (16, 128)" in " ".join(_chip_rules(get_spec("v7x")))
    gpu = hardware_brief("gpu")
    assert "pltriton.CompilerParams(num_warps" in gpu and "fori_loop" in gpu
    assert "```" not in hardware_brief("cpu")


@pytest.mark.parametrize("target,source", [("tpu", TPU_SKELETON), ("gpu", GPU_SKELETON)], ids=["tpu", "gpu"])
def test_the_skeletons_lower_and_pass_the_judge(target, source):
    res = evaluate(matmul_task(), Candidate.from_source(source), target=target, measure=False)
    assert res.status == "correct", res.reason


# --- no wasted calls -----------------------------------------------------------------------------------
def test_plan_names_come_from_content():
    a, b = Plan(**PLAN_A), Plan(**PLAN_B)
    assert plan_name(a) == plan_name(Plan(**{**PLAN_A, "expected_speedup": 3.0, "risks": ["x"]}))  # same plan, same name
    assert plan_name(a) != plan_name(b) and plan_name(a).startswith("jax-compute-mean-squares-f32-")
    assert plan_name(a).endswith(plan_digest(a))


def test_a_repeated_plan_is_asked_again_and_never_implemented_twice(fake, rmsnorm):
    """The planner repeats the plan of iteration 1: it is asked again with the repeat listed (a different prompt),
    and only the new plan reaches the implementer."""
    fake.route(Agents(plan=[{"plan": PLAN_A}, {"plan": PLAN_A}, {"plan": PLAN_B}],
                      code=[{"code": WRONG, "config_space": {}}, {"code": KERNEL, "config_space": {}}],
                      analysis=[{"analysis": STOP}]))
    author = LMAuthor(gemini(fake), seeds=False, synthesize_tests=False)
    traj = Auto(author, target="cpu", iterations=2, tune=False).run(rmsnorm)
    assert [s.asked for s in fake.seen] == ["plan", "code", "plan", "plan", "code", "analysis"]
    plans = prompts(fake, "plan")
    assert len(set(plans)) == len(plans) and "Plans you already proposed" in plans[2]
    assert [s.proposal for s in traj.snapshots] == [plan_name(Plan(**PLAN_A)), plan_name(Plan(**PLAN_B))]


def test_without_a_device_the_analyst_is_not_asked_and_the_run_stops_after_the_first_correct_kernel(fake, caplog):
    plan = {"approach": "pallas", "strategy": "Tile the matmul (block_m, block_n, block_k) with an f32 VMEM accumulator.",
            "tiling": {"block_m": 256, "block_n": 256, "block_k": 512}, "memory_placement": "blocks in VMEM",
            "pipelining": "k last", "expected_speedup": 1.1, "risks": []}
    fake.route(Agents(plan=[{"plan": plan}], code=[{"code": TPU_SKELETON, "config_space": {}}], analysis=[{"analysis": STOP}]))
    author = LMAuthor(gemini(fake), seeds=False, synthesize_tests=False)
    assert "stops after the first correct kernel" in author.device_notice("tpu") and author.device_notice("cpu") is None
    calls_at_notice = []

    class Spy(logging.Handler):
        def emit(self, record):
            if "no tpu device here" in record.getMessage():
                calls_at_notice.append(len(fake.seen))

    spy = Spy()
    logging.getLogger("mk.programs.lm_author").addHandler(spy)
    try:
        traj = Auto(author, target="tpu", iterations=4, tune=False).run(matmul_task())
    finally:
        logging.getLogger("mk.programs.lm_author").removeHandler(spy)
    assert calls_at_notice and calls_at_notice[0] == 0  # said up front, before the first call was spent
    assert [s.status for s in traj.snapshots] == ["correct"] and traj.best.speedup is None
    assert [s.asked for s in fake.seen] == ["plan", "code"]  # no analyst (nothing timed), no second plan
    assert "no tpu device here to time kernels: stopped after the first correct kernel" in traj.stop_reason
    assert "the profile analyst was not asked" in traj.snapshots[0].feedback
    # asking to keep exploring is one flag
    explorer = LMAuthor(gemini(fake), seeds=False, synthesize_tests=False, explore_without_device=True)
    assert "exploring after the first correct kernel anyway" in explorer.device_notice("tpu")
    assert explorer.fork().explore_without_device


def test_beam_search_width_2_depth_2_repeats_no_planner_prompt(fake, tmp_path):
    """A beam search (width 2, depth 2, two iterations per node) whose model keeps proposing the same strategies:
    no planner prompt is sent twice, and no implementer call is answered from DSPy's cache (a plan another
    branch took is drawn as a fresh sample)."""
    import search_support as sup
    from mk.programs.search import Search
    from mk.store import Store

    from lm_fakes import CONTINUE

    task = load_task(str(sup.write_task(tmp_path)))
    strategies = ["Fold the doubling into one tanh pass and scale once at the end of the row.",
                  "Compute tanh once and add it to itself instead of multiplying by two.",
                  "Use a single fused multiply after tanh so XLA emits one elementwise loop.",
                  "Split the rows into two halves and process each with tanh then scale."]
    plans = [{"plan": {**PLAN_A, "strategy": s}} for s in strategies]
    codes = [{"code": f"# speed {1.5 + 0.1 * i}\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0 + {i} * 0.0\n",
              "config_space": {}} for i in range(20)]
    fake.route(Agents(plan=[plans[0], plans[0], plans[1], plans[1], plans[2], plans[0], plans[3], plans[2], plans[3]],
                      code=codes, analysis=[{"analysis": CONTINUE}]))
    accountant = Accountant()
    base = gemini_lm("gemini-2.5-flash", api_key="test-key", base_url=fake.base_url, timeout_s=20, num_retries=0)
    author = LMAuthor(accounted(base, accountant), seeds=False, synthesize_tests=False)  # DSPy's cache on (in memory)
    with Store.open(tmp_path / "s.duckdb") as store:
        res = Search(author, algorithm="beam", width=2, depth=2, branches=2, iterations=2, target="cpu", workers="inline",
                     evaluate=sup.stub_evaluate, store=store, tune=False).run(task)
    assert res.best is not None and max(n.depth for n in res.nodes) == 2
    planner = prompts(fake, "plan")
    assert len(planner) >= 6 and len(set(planner)) == len(planner)  # no planner prompt repeats
    assert not [c for c in accountant.calls if c.cache_hit]  # nothing answered from the cache: every call a new sample
    assert all(n.status != "duplicate" for n in res.nodes)  # so no node re-judged another's code
    hints = [p for p in planner if "Sibling branches already chose:" in p]
    assert hints and all(any(s in p for s in strategies) for p in hints)  # siblings' strategies, not just names


def test_the_reason_is_the_cause_not_a_docs_link_and_earlier_fixes_quote_it():
    """JAX's Pallas errors end with "See details at <url>": the verdict's line is the cause above it; the fixer's
    list of earlier attempts quotes each attempt's reason, not the candidate's traceback lines after it."""
    from mk.harness.judging import _last_line
    from mk.harness.results import WHOLE_ERROR, reason_of
    from mk.programs.lm_author import _fixes_text

    err = ("ValueError: the last two dimensions of your block shape must be divisible by 8 and 128\n"
           "See details at https://docs.jax.dev/en/latest/pallas/grid_blockspec.html#pallas-blockspec")
    assert _last_line(err).startswith("ValueError: the last two dimensions")
    first = f"compile check failed: cannot tile 129 rows{WHOLE_ERROR}\nValueError: ...\ncandidate.py line 10, in _pick: raise"
    text = _fixes_text([{"error": first, "explanation": "padded the rows", "code": "x"}], "compile check failed: still 129")
    assert "'compile check failed: cannot tile 129 rows'" in text and "line 10" not in text and "still 129" in text
    assert reason_of(first) == "compile check failed: cannot tile 129 rows"
