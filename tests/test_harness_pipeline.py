"""The evaluation pipeline end to end: suite, sandboxed worker, comparison, timing, verdicts."""

from __future__ import annotations

import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.candidate import Candidate, load_candidate
from mk.errors import CandidateError
from mk.harness import Timeouts, build_suite, evaluate
from mk.harness.compare import check_inputs, compare_outputs, compare_one
from mk.harness.results import StepResult
from mk.harness.suite import mk_home
from mk.task import ArgSpec, Init, Scale, Task, Tolerance

FAST = Timeouts(import_s=60, compile_s=60, case_s=30, cost_s=30, timing_s=60)


def rmsnorm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def rms_task(**kw) -> Task:
    scales = {"ci": Scale("ci", {"m": 16, "n": 128}), "small": Scale("small", {"m": 8, "n": 256})}
    return Task("rmsnorm", rmsnorm, (ArgSpec("x", ("m", "n"), "float32"), ArgSpec("w", ("n",), "float32")),
                scales, default_scale="ci", **kw)


def src(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


PURE = src("""
    import jax
    import jax.numpy as jnp

    def kernel(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w
""")

PALLAS = src("""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def _body(x_ref, w_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w_ref[...]

    def kernel(x, w, block_m=8):
        m, n = x.shape
        return pl.pallas_call(
            _body,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(m // block_m,),
            in_specs=[pl.BlockSpec((block_m, n), lambda i: (i, 0)), pl.BlockSpec((1, n), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((block_m, n), lambda i: (i, 0)),
        )(x, w.reshape(1, n))

    CONFIG_SPACE = {"block_m": [8, 16]}
""")


@pytest.fixture(scope="module")
def task() -> Task:
    return rms_task()


@pytest.fixture(scope="module")
def small_suite(task):
    return build_suite(task, scales=["ci"], seeds=(0,), distributions=("normal", "uniform"))


def no_static(monkeypatch):
    """Runtime defences are tested on their own: let the source past the static check."""
    monkeypatch.setattr(sys.modules["mk.harness.evaluate"], "static_step",
                        lambda *a, **k: StepResult(name="static", ok=True, detail="skipped in this test"))


# --- candidates -------------------------------------------------------------
def test_public_entry_points():
    import mk
    import mk.harness

    assert mk.evaluate is evaluate and mk.harness.evaluate is evaluate and callable(evaluate)



def test_load_candidate_entry_and_config_space(tmp_path):
    p = tmp_path / "k.py"
    p.write_text(PALLAS)
    c = load_candidate(p)
    assert c.entry == "kernel" and c.config_space == {"block_m": (8, 16)}
    assert Candidate.from_source("def workload(x):\n    return x\n").entry == "workload"
    with pytest.raises(CandidateError, match="defines none of"):
        Candidate.from_source("def helper(x):\n    return x\n")
    with pytest.raises(CandidateError, match="does not exist"):
        load_candidate(tmp_path / "missing.py")
    with pytest.raises(CandidateError, match="not a literal"):
        Candidate.from_source("N = 4\nCONFIG_SPACE = {'b': [N]}\ndef kernel(x):\n    return x\n")


# --- suite ------------------------------------------------------------------
def test_suite_covers_scales_and_hash_is_stable(task):
    a, b = build_suite(task), build_suite(task)
    assert a.hash == b.hash and len(a.hash) == 64
    assert set(a.scales) == {"ci", "small", "heldout"} and a.heldout_names == ("heldout",)
    assert {c.distribution for c in a.cases} == {"native", "normal", "uniform", "large_magnitude", "edges"}
    assert {c.seed for c in a.cases} == {0, 1}
    assert build_suite(task, seeds=(0, 2)).hash != a.hash
    sub = a.subset(2)
    assert len(sub.cases) == 2 and set(sub.scales) == {"ci", "small"} and sub.hash != a.hash


def test_suite_drops_distribution_that_breaks_structured_inputs():
    t = Task("logsum", lambda x: jnp.log(x).sum(-1), (ArgSpec("x", (4, 8), "float32", Init("uniform", low=0.5, high=2.0)),),
             {"ci": Scale("ci")})
    s = build_suite(t)
    # distributions keep the input's own location and scale (uniform stays in [0.5, 2]); outliers at -300 break log
    assert {"native", "uniform"} <= {c.distribution for c in s.cases}
    assert any("large_magnitude" in d and "non-finite" in d for d in s.dropped)


# --- verdicts ---------------------------------------------------------------
def test_correct_pure_jax_on_cpu_with_timing(task):
    r = evaluate(task, PURE, target="cpu", scale="ci", timeouts=FAST)
    assert r.status == "correct", r.reason
    assert r.suite_hash == build_suite(task, scales=["ci"]).hash
    suite = build_suite(task, scales=["ci"])  # ci and the held-out scale, one fresh-seed case each, and fresh sizes
    sized = {c.scale for c in r.cases} - {"ci", "heldout"}  # a strict fresh size, and a loose one (two groups of dims move)
    assert 1 <= len(sized) <= 2 and all(s.startswith("size-") for s in sized)
    assert len(r.cases) == len(suite.cases) + len(suite.scales) + len(sized)
    assert all(c.ok and c.max_abs is not None for c in r.cases)
    assert r.timing.measured and r.timing.speedup > 0 and r.timing.runs >= 10 and r.timing.input_sets >= 3
    assert r.cost.candidate_flops and r.cost.reference_flops
    assert [s.name for s in r.steps] == ["static", "compile", "correctness", "timing", "cost"]
    assert any(mk_home().glob("cache/reference/*/ci-s0-normal/out_0__float32.npy"))


def test_correct_pallas_rmsnorm_on_tpu_interpret(task):
    r = evaluate(task, PALLAS, target="tpu", timeouts=FAST)  # every scale: ci and small, and the held-out one
    assert r.status == "correct", r.reason
    assert set(r.scales) == {"ci", "small", "heldout"}
    assert r.timing is not None and not r.timing.measured and "no tpu device" in r.timing.reason


def test_tpu_without_pallas_is_rejected(task, small_suite):
    r = evaluate(task, PURE, target="tpu", suite=small_suite, timeouts=FAST)
    assert r.status == "rejected" and "pallas" in r.reason.lower()
    ok = evaluate(task, PURE, target="tpu", suite=small_suite, require_pallas=False, timeouts=FAST)
    assert ok.status == "correct", ok.reason


def test_timing_rotates_three_input_sets_with_a_small_suite(task, small_suite):
    from mk.harness import TimingOptions

    r = evaluate(task, PURE, suite=small_suite, timing=TimingOptions(budget_s=0.2, min_reps=6, max_reps=50), timeouts=FAST)
    assert r.status == "correct", r.reason
    assert r.timing.measured and r.timing.input_sets == 3 and 6 <= r.timing.runs <= 50
    assert all(f.startswith(("implausible", "noisy")) for f in r.flags)  # a loaded machine may make timings noisy


def test_incorrect_output(task, small_suite):
    bad = PURE.replace("* w\n", "* w * 1.01\n")
    r = evaluate(task, bad, suite=small_suite, measure=False, timeouts=FAST)
    assert r.status == "incorrect" and "outside atol" in r.reason
    assert r.timing is not None and not r.timing.measured


def test_constant_output_passing_loose_tolerance_is_refused():
    # atol=10 accepts zeros for outputs of at most ~9: the tolerance is tightened to the output's scale (and rule 4,
    # uncorrelated, would refuse it next), so the candidate is incorrect with the tightening in its flags
    t = rms_task(tolerance=Tolerance(atol=10.0, rtol=0.0))
    zeros = src("""
        import jax.numpy as jnp

        def kernel(x, w):
            return jnp.zeros_like(x)
    """)
    r = evaluate(t, zeros, suite=build_suite(t, scales=["ci"], seeds=(0,), distributions=("normal",)), measure=False, timeouts=FAST)
    assert r.status == "incorrect" and ("uncorrelated" in r.reason or "outside atol=0.3" in r.reason), r.reason
    assert any(f.startswith("tolerance: the task's tolerance (atol=10, rtol=0) cannot reject") for f in r.flags), r.flags


def test_compile_error(task, small_suite):
    broken = src("""
        import jax.numpy as jnp

        def kernel(x, w):
            return jnp.dot(x, x) * w
    """)
    r = evaluate(task, broken, suite=small_suite, timeouts=FAST)
    assert r.status == "compile_error" and "TypeError" in r.reason
    assert r.step("compile").ok is False


def test_hang_times_out(task, small_suite):
    hang = src("""
        def kernel(x, w):
            while True:
                pass
    """)
    r = evaluate(task, hang, suite=small_suite, timeouts=Timeouts(import_s=60, compile_s=2, case_s=2))
    assert r.status == "timeout" and "compile" in r.reason and "limit" in r.reason
    spin = src("""
        import jax

        def kernel(x, w):
            n, y = jax.lax.while_loop(lambda c: c[0] > -1.0, lambda c: (c[0] + 1.0, c[1]), (x[0, 0] * 0.0, x))
            return y + n
    """)
    r = evaluate(task, spin, suite=small_suite, timeouts=Timeouts(import_s=60, compile_s=30, case_s=2))
    assert r.status == "timeout" and "case 0" in r.reason


def test_memory_blowup_is_crashed(task, small_suite):
    hog = src("""
        import numpy as np

        def kernel(x, w):
            big = np.ones((400_000_000,), np.float64)
            return x * w + float(big[0]) - 1.0
    """)
    r = evaluate(task, hog, suite=small_suite, timeouts=FAST, memory_limit_mb=1500)
    assert r.status == "crashed" and "memory" in r.reason.lower()


def test_exit_and_segfault_are_crashed(task, small_suite, monkeypatch):
    no_static(monkeypatch)
    exits = src("""
        import os

        def kernel(x, w):
            os._exit(3)
    """)
    r = evaluate(task, exits, suite=small_suite, timeouts=FAST)
    assert r.status == "crashed" and "code 3" in r.reason
    segv = src("""
        import faulthandler

        def kernel(x, w):
            faulthandler._sigsegv()
    """)
    r = evaluate(task, segv, suite=small_suite, timeouts=FAST)
    assert r.status == "crashed" and "SIGSEGV" in r.reason


def test_per_output_tolerances():
    def two(x):
        return x + 1.0, x * 2.0

    def make(atol):
        return Task("two", two, (ArgSpec("x", (8, 16), "float32"),), {"ci": Scale("ci")}, tolerance=Tolerance(atol=atol, rtol=0.0))

    cand = src("""
        def kernel(x):
            return x + 1.0, x * 2.0 + 1e-3
    """)
    loose = make((1e-6, 1e-2))
    assert evaluate(loose, cand, measure=False, timeouts=FAST).status == "correct"
    strict = make((1e-6, 1e-6))
    r = evaluate(strict, cand, measure=False, timeouts=FAST)
    assert r.status == "incorrect" and "output 1" in r.reason


# --- comparison units ---------------------------------------------------------
def test_compare_units():
    ref = np.linspace(-1, 1, 64, dtype=np.float32)
    assert compare_one(ref, ref.copy(), 1e-6, 1e-6).ok
    nan = ref.copy()
    nan[3] = np.nan
    assert "NaN" in compare_one(ref, nan, 1e-6, 1e-6).reason
    assert "shape" in compare_one(ref, ref[:10], 1e-6, 1e-6).reason
    assert "dtype" in compare_one(ref, ref.astype(np.float64), 1e-6, 1e-6).reason
    assert "uncorrelated" in compare_one(ref, np.zeros_like(ref), 5.0, 0.0).reason
    assert "returned 1" in compare_outputs([ref, ref], [ref], Tolerance()).reason
    assert check_inputs([ref], {0: ref.copy()}) is None
    assert "mutated" in check_inputs([ref], {0: ref * 2})
    assert "donated" in check_inputs([ref], {})


def test_implausible_speedups_are_flagged():
    from mk.harness.timing import plausibility_flags, summarize

    fast = summarize(np.full(12, 1e-4), np.full(12, 2e-3), scale="ci", input_sets=3)
    assert fast.speedup == pytest.approx(20.0)
    assert any("exceeds 10x" in f for f in plausibility_flags(fast))
    normal = summarize(np.full(12, 1e-3), np.full(12, 2e-3), scale="ci", input_sets=3)
    assert plausibility_flags(normal) == []
    assert any("roofline" in f for f in plausibility_flags(normal, roofline_floor_s=5e-3))


def test_noisy_timings_are_flagged():
    from mk.harness.timing import plausibility_flags, summarize

    rng = np.random.default_rng(0)
    noisy = summarize(np.concatenate([np.full(6, 1e-3), np.full(6, 4e-3)]), np.full(12, 2e-3), scale="ci", input_sets=3)
    assert any(f.startswith("noisy: the candidate") for f in plausibility_flags(noisy))
    steady = summarize(1e-3 + rng.uniform(0, 1e-5, 12), np.full(12, 2e-3), scale="ci", input_sets=3)
    assert not any(f.startswith("noisy") for f in plausibility_flags(steady))


def test_timeouts_mapping_with_an_unknown_phase_says_which_exist(task):
    from mk.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        evaluate(task, PURE, target="cpu", scale="ci", timeouts={"compil": 5})
    assert "compil_s" in str(err.value) and "compile_s" in (err.value.hint or "")
