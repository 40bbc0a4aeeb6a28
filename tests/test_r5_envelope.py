"""Round 5 of the red team on issue 10 ("Verified means general"): statuses the candidate's words cannot choose, and
fresh sizes that cover the box the envelope claims (tests/adversarial/README.md, round 5)."""

from __future__ import annotations

import importlib
import secrets
import textwrap
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from mk.harness import build_suite, evaluate
from mk.harness.envelope import OUTSIDE, Envelope, declared_outside, declared_rule
from mk.harness.heldout import fresh_size, fresh_sizes, sized
from mk.harness.process import Timeouts
from mk.candidate import Candidate
from mk.job import Best, with_provenance
from mk.targets import get_target
from mk.task import ArgSpec, Scale, StaticArg, Task, Tolerance

evaluate_module = importlib.import_module("mk.harness.evaluate")  # mk.harness.evaluate is also the function


def src(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


def rowmean_task() -> Task:
    return Task("rowmean", lambda x: jnp.mean(x, axis=-1, keepdims=True) * x, (ArgSpec("x", ("m", "n"), "float32"),),
                {"ci": Scale("ci", {"m": 16, "n": 48})})


def rms(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rms_task() -> Task:
    return Task("rms", rms, (ArgSpec("x", ("m", "n"), "float32"), ArgSpec("w", ("n",), "float32")),
                {"ci": Scale("ci", {"m": 16, "n": 256})}, static=(StaticArg("eps", 1e-6),), tolerance=Tolerance(1e-4, 1e-4))


GENERAL_RMS = src("""
    import jax
    import jax.numpy as jnp

    def kernel(x, w, eps):
        return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) / x.shape[-1] + eps) * w
""")
ROWMEAN = "import jax.numpy as jnp\n\n\ndef kernel(x):\n    return jnp.sum(x, axis=-1, keepdims=True) / {n} * x\n"


def _written(task: Task, source: str, path: Path, config: dict | None = None) -> Path:
    suite = build_suite(task)
    best = Best(source, "correct", None, "hand-written", dict(config or {}), "")
    env = Envelope.of(task, suite)
    text = with_provenance(best, task, suite.hash, get_target("cpu"), env)
    if config:  # the guard told the verified config (the change proposed for with_provenance, which this file cannot make)
        text = text.replace(env.guard_source(Candidate.from_source(source).entry),
                            env.guard_source(Candidate.from_source(source).entry, tuned=config))
    path.write_text(text)
    return path


# --- fresh sizes cover the box the envelope claims -------------------------------------------------------------------
def test_fresh_sizes_reach_every_point_the_envelope_admits():
    from mk.harness.heldout import _Fresh

    task = rowmean_task()
    env = Envelope.of(task, build_suite(task))
    (m_rule, n_rule), = env.axes
    box = {(m, n) for m in range(16, m_rule.top + 1, 16) for n in range(48, n_rule.top + 1, 16)}
    judged = {(16, 48), (32, 64)}
    fresh = _Fresh(task)
    seen = {tuple(fresh.draw(secrets, strict)) for _ in range(5000) for strict in (True, False)}
    assert seen == box - judged  # mixes with an authoring size included: (16, 112), (32, 48), ...
    for _ in range(20):  # what an evaluation adds: inside the envelope, and its name reproduces it
        for f in fresh_sizes(task, secrets):
            assert env.check(list(f.shapes), ["float32"]) is None and sized(task, f.name).shapes == f.shapes


def test_the_strict_fresh_size_breaks_every_relation_the_judged_sizes_keep():
    task = rowmean_task()  # n = m + 32 at ci (16, 48) and held out (32, 64)
    for _ in range(200):
        (m, n), = fresh_size(task, secrets).shapes
        assert m not in (16, 32) and n not in (48, 64) and n != m + 32
    # one group of dims (rms: m and n move apart, but w's n is tied to x's): a loose size needs two groups
    assert len(fresh_sizes(rms_task(), secrets)) == 2
    one = Task("one", lambda x: x * 2, (ArgSpec("x", ("m", 128), "float32"),), {"ci": Scale("ci", {"m": 16})})
    assert fresh_size(one, secrets, strict=False) is None and len(fresh_sizes(one, secrets)) == 1


#: right where m is a size the author or the held-out scale had, if n is the one it had there: a mix of an authoring
#: m and a new n is wrong (the strict size alone, with every dim new, never draws one)
CROSS = src("""
    import jax.numpy as jnp

    def kernel(x):
        m, n = x.shape
        if m == 16:
            n = 48
        if m == 32:
            n = 64
        return jnp.sum(x, axis=-1, keepdims=True) / n * x
""")


def test_a_kernel_fitted_to_authoring_mixes_is_caught_at_a_loose_size(monkeypatch):
    task = rowmean_task()
    draws = [fresh_size(task, secrets, strict=False).shapes[0] for _ in range(400)]
    caught = sum((m, n) in {(16, 64), (32, 48)} or (m in (16, 32) and n not in (48, 64)) for m, n in draws) / len(draws)
    assert caught > 0.25, caught  # per evaluation (before round 5: never)
    mix = sized(task, "size-16x96")
    monkeypatch.setattr(evaluate_module, "fresh_sizes", lambda t, rng: [fresh_size(t, rng), mix])
    res = evaluate(task, CROSS, target="cpu", measure=False)
    assert res.status == "incorrect" and res.failed_case.startswith("size-16x96"), res.reason
    res = evaluate(task, ROWMEAN.format(n="x.shape[-1]"), target="cpu", measure=False)  # the honest one there
    assert res.status == "correct" and "16x96" in res.reason, res.reason


# --- outside_envelope is the judge's finding ----------------------------------------------------------------------------
def test_declared_rule_reads_one_plain_literal_only():
    good = "MK_ENVELOPE = {'names': [], 'dtypes': [], 'axes': [], 'equal': [], 'static': [], 'exact': False, 'points': []}\n"
    assert declared_rule(good) is not None and declared_rule(good)["_tuned"] == {}
    assert declared_rule("x = 1\n") is None
    assert declared_rule(good + good) is None  # assigned twice: which one the guard reads is not the judge's guess
    assert declared_rule("MK_ENVELOPE = dict(names=[])\n") is None  # not a literal: never evaluated
    assert declared_rule("MK_ENVELOPE = {'names': []}\n") is None
    assert declared_rule("def f(:\n") is None


def test_a_written_kernel_outside_its_envelope_is_refused_by_the_judge_before_it_runs(tmp_path):
    task = rms_task()
    kernel = _written(task, GENERAL_RMS, tmp_path / "k.py")
    # the kernel's own trace is never reached: the judge's check of the declaration decides
    text = kernel.read_text().replace("    return x * jax.lax.rsqrt", "    raise RuntimeError('traced')\n    return x * jax.lax.rsqrt")
    odd = task.with_scales({"odd": Scale("odd", {"m": 16, "n": 200})})
    res = evaluate(odd, text, target="cpu", measure=False)
    assert res.status == "outside_envelope" and "excludes scale odd" in res.reason and "[1] is 200" in res.reason
    assert OUTSIDE in res.reason
    # inside its envelope, judged with the task's own held-out and both fresh sizes: correct
    res = evaluate(task, kernel, target="cpu", measure=False)
    assert res.status == "correct" and "fresh sizes" in res.reason, res.reason


def test_a_guard_narrower_than_its_declaration_is_a_failure_not_a_refusal(tmp_path):
    """A file whose MK_ENVELOPE admits the judged sizes but whose code raises the guard's words there (a fitted
    kernel dressed as a written one) is judged: compile_error, never outside_envelope."""
    task = rms_task()
    fitted = GENERAL_RMS.replace("    return x", "    if x.shape[-1] != 256:\n        raise ValueError('" + OUTSIDE +
                                 ": input x axis 1')\n    return x")
    kernel = _written(task, fitted, tmp_path / "k.py")
    res = evaluate(task, kernel, target="cpu", measure=False)
    assert res.status == "compile_error" and "judged as a failure" in res.reason, res.reason


def test_a_malformed_declaration_is_judged_as_none(tmp_path):
    bad = ("MK_ENVELOPE = {'names': ['x'], 'dtypes': ['float32'], 'axes': [[['multiple', [16], 0, 80], ['fixed', [48], 0, 0]]],"
           " 'equal': [], 'static': [], 'exact': False, 'points': []}\n")  # unit 0: the check cannot run
    with pytest.raises(ValueError, match="cannot be checked"):
        declared_outside(declared_rule(bad), [jax.ShapeDtypeStruct((16, 48), jnp.float32)], {})
    res = evaluate(rowmean_task(), bad + ROWMEAN.format(n="x.shape[-1]"), target="cpu", measure=False)
    assert res.status == "correct" and any("cannot be checked" in f for f in res.flags), (res.reason, res.flags)


def test_a_tunable_other_than_the_verified_one_is_outside_the_envelope(tmp_path):
    task = rms_task()
    source = GENERAL_RMS.replace("def kernel(x, w, eps):", "CONFIG_SPACE = {'block_rows': [8, 16]}\n\n\ndef kernel(x, w, eps, block_rows=8):")
    kernel = _written(task, source, tmp_path / "k.py", config={"block_rows": 16})
    namespace: dict = {}
    exec(compile(kernel.read_text(), "k.py", "exec"), namespace)
    x, w = jnp.ones((16, 256)), jnp.ones(256)
    assert namespace["kernel"](x, w, 1e-6).shape == (16, 256)
    assert namespace["kernel"](x, w, 1e-6, block_rows=16).shape == (16, 256)  # the verified config itself
    with pytest.raises(ValueError, match="keyword block_rows=8 was not verified"):
        namespace["kernel"](x, w, 1e-6, block_rows=8)
    res = evaluate(task, kernel, target="cpu", measure=False, config={"block_rows": 8})
    assert res.status == "outside_envelope" and "block_rows=8" in res.reason, res.reason


# --- unverifiable_here is JAX's word, not the candidate's ---------------------------------------------------------------
def _trace_verdict(reply: dict, source: str = "def kernel(x):\n    return x\n") -> tuple[str, str]:
    class Tracer:
        def ask(self, request, *a):
            return {"ok": True} if request["op"] == "load" else reply

    run = SimpleNamespace(scales=("ci",), tracer=Tracer(), timeouts=Timeouts(), seconds={}, target=get_target("cpu"),
                          cand=SimpleNamespace(source=source))
    with pytest.raises(evaluate_module._Verdict) as got:
        evaluate_module._trace(run)
    return got.value.status, got.value.reason


def test_only_an_error_jax_raised_means_this_machine_cannot():
    words = "NotImplementedError: Unimplemented primitive in Pallas TPU interpret mode: foo"
    assert _trace_verdict({"phase": "compile", "error": words, "origin": "library"})[0] == "unverifiable_here"
    assert _trace_verdict({"phase": "compile", "error": words, "origin": "candidate"})[0] == "compile_error"
    assert _trace_verdict({"phase": "compile", "error": words})[0] == "compile_error"  # no origin: not shown
    # JAX raised it, but with words the candidate wrote into its own file (a string JAX quotes back)
    assert _trace_verdict({"phase": "compile", "error": words, "origin": "library"},
                          "X = 'Unimplemented primitive in Pallas TPU interpret'\n")[0] == "compile_error"
    status, reason = _trace_verdict({"phase": "compile", "error": f"ValueError: {OUTSIDE}: x", "origin": "library"})
    assert status == "compile_error" and "judged as a failure" in reason
