"""mk.optimize through the Python API, offline: the envelope decides kernel or reference, pytrees, keywords,
statics, Python scalars, jit/vmap/grad, a cache keyed by what the function computes, and the README example.

Every kernel here comes from the offline author's "sum moved before the matmul" rewrite on ``target="cpu"``
(a pure-JAX kernel, so it runs on this machine and the dispatch is exercised for real); the tests assert the
author still finds it, so a regression there fails here loudly instead of turning the tests vacuous.
"""

from __future__ import annotations

import inspect
import re
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mk
from mk.api import OptimizedFunction, cache_key
from mk.errors import ArgumentError, FallbackWarning
from mk.errors import ConfigError, MkError, TaskError
from mk.errors import EnvelopeError
from mk.loaders.callable import callable_task

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[1] / "README.md"
FAST = {"target": "cpu", "lm": "offline", "iterations": 1, "max_trials": 1}


def head(params, x, scale, reduce="sum"):
    s = x @ params["w"]
    r = s.sum(axis=1, keepdims=True) if reduce == "sum" else s.max(axis=1, keepdims=True)
    return {"score": r * scale, "raw": r}


HEAD_SHAPES = [{"w": ((64, 48), "float32")}, ((32, 64), "float32"), ((), "float32")]  # params, x, scale (0-d)


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    return {"db": root / "mk.duckdb", "out": root / "out"}


@pytest.fixture(scope="module")
def fast(where):
    f = mk.optimize(head, HEAD_SHAPES, static_argnames=("reduce",), **FAST, **where)
    assert f.report.status == "correct", f"the offline author no longer handles head: {f.report.stop_reason}"
    return f


def _inputs(rows=96, cols=80, seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"w": jax.random.normal(k1, (64, cols))}, jax.random.normal(k2, (rows, 64))


def _close(got, want, tol=1e-4):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))


def _no_warning(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    assert not [w for w in caught if issubclass(w.category, FallbackWarning)], [str(w.message) for w in caught]
    return out


# --- the envelope ---------------------------------------------------------------------------------------
def test_new_shapes_inside_the_envelope_run_the_kernel_outside_the_reference(fast):
    params, x = _inputs(96, 80)  # neither size was judged: inside the rule ("any multiple of 32 >= 32", ...)
    assert fast.envelope is not None and fast.reason(params, x, 0.5) is None
    before = fast.calls["kernel"]
    _close(_no_warning(lambda: fast(params, x, 0.5)), head(params, x, 0.5))
    assert fast.calls["kernel"] == before + 1
    _close(fast.run_kernel(params, x, 0.5), head(params, x, 0.5))

    small = x[:8]  # 8 rows: outside; the reference runs, with one warning that says why
    with pytest.warns(FallbackWarning, match=r"outside the verified envelope: x\[0\] is 8; verified: any multiple of 32"):
        _close(fast(params, small, 0.5), head(params, small, 0.5), tol=0)
    _close(_no_warning(lambda: fast(params, small, 0.5)), head(params, small, 0.5), tol=0)  # the same reason: no second warning
    with pytest.raises(EnvelopeError, match=r"x\[0\] is 8") as err:
        fast.run_kernel(params, small, 0.5)
    assert "verified on" in str(err.value) and isinstance(err.value, ValueError)
    with pytest.warns(FallbackWarning, match="input 'x' is float16, verified as float32"):
        fast(params, x.astype(jnp.float16), 0.5)


def test_static_given_at_call_time_is_honoured(fast):
    params, x = _inputs()
    seen = []
    spy = OptimizedFunction(head, fast.task, fast.report, fast.source, spec=fast.spec)
    kernel = spy._kernel
    spy._kernel = lambda *a, **kw: (seen.append(kw), kernel(*a, **kw))[1]
    _close(_no_warning(lambda: spy(params, x, 0.5, "sum")), head(params, x, 0.5, "sum"))
    assert seen == [{"reduce": "sum"}]  # the kernel received the call's static
    for call in (lambda: spy(params, x, 0.5, reduce="max"), lambda: spy(params, x, 0.5, "max")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _close(call(), head(params, x, 0.5, "max"), tol=0)  # never the kernel's 'sum'
    assert len(seen) == 1 and spy.calls["reference"] == 2
    assert [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)] == []  # warned once, before
    with pytest.raises(EnvelopeError, match="static reduce='max'; verified: 'sum'"):
        spy.run_kernel(params, x, 0.5, reduce="max")
    jitted = jax.jit(spy, static_argnames=("reduce",))
    _close(jitted(params, x, 0.5, reduce="max"), head(params, x, 0.5, "max"))
    _close(jitted(params, x, 0.5, reduce="sum"), head(params, x, 0.5, "sum"))
    assert len(seen) == 2


def test_pytree_keyword_and_python_scalar_inputs(fast):
    params, x = _inputs()
    assert [a.name for a in fast.task.args] == ["params.w", "x", "scale"]
    out = _no_warning(lambda: fast(params=params, x=x, scale=0.5))  # keywords; a Python float for the 0-d input
    assert set(out) == {"score", "raw"}  # the kernel's flat outputs, rebuilt into the reference's dict
    _close(out, head(params, x, 0.5))
    _close(_no_warning(lambda: fast(params, x, 2)), head(params, x, 2.0))  # an int for a float32 0-d input
    _close(_no_warning(lambda: fast(params, x, np.float32(0.25))), head(params, x, np.float32(0.25)))
    with pytest.warns(FallbackWarning, match="structure"):  # a tree never verified: the reference, which ignores 'b'
        _close(fast({"w": params["w"], "b": jnp.ones(3)}, x, 0.5), head(params, x, 0.5), tol=0)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'scal'") as err:
        fast(params, x, scal=0.5)
    assert isinstance(err.value, TypeError) and isinstance(err.value, ConfigError)
    with pytest.raises(ArgumentError, match="missing required argument"):
        fast(params, x)


def test_jit_vmap_and_grad_give_the_reference_numbers(fast):
    params, x = _inputs()
    before, traced = dict(fast.calls), dict(fast.traces)
    jitted = jax.jit(fast)
    for _ in range(5):
        _close(_no_warning(lambda: jitted(params, x, 0.5)), head(params, x, 0.5))
    # the kernel, chosen once at trace time: one trace, not five calls (calls counts only what mk saw run)
    assert fast.traces["kernel"] == traced["kernel"] + 1 and fast.calls == before
    fast(params, x, 0.5)
    assert fast.calls["kernel"] == before["kernel"] + 1 and fast.traces["kernel"] == traced["kernel"] + 1

    xs = jnp.stack([x, 2 * x, -x])
    want = jax.vmap(head, in_axes=(None, 0, None))(params, xs, 0.5)
    with pytest.warns(FallbackWarning, match="under jax.vmap"):
        _close(jax.vmap(fast, in_axes=(None, 0, None))(params, xs, 0.5), want)
    _close(jax.vmap(jax.jit(fast), in_axes=(None, 0, None))(params, xs, 0.5), want)
    assert fast.traces["batched"] == traced["batched"] + 2

    def loss(f):
        return lambda p, x: f(p, x, 0.5)["score"].sum() + (f(p, x, 0.5)["raw"] ** 2).mean()

    _close(jax.grad(loss(fast), argnums=(0, 1))(params, x), jax.grad(loss(head), argnums=(0, 1))(params, x))
    _close(jax.jit(jax.grad(loss(fast)))(params, x), jax.grad(loss(head))(params, x))
    with pytest.raises(TypeError, match="forward-mode"):  # refused, never silently wrong
        jax.jvp(lambda x: fast(params, x, 0.5)["raw"], (x,), (x,))


def test_no_kernel_runs_the_reference_and_run_kernel_refuses(where):
    def running(x):
        return jnp.cumsum(x, axis=0)

    f = mk.optimize(running, [((16, 128), "float32")], **FAST, **where)
    assert f.report.status == "no_correct_candidate" and f.envelope is None
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    with pytest.warns(FallbackWarning, match="no verified kernel"):
        _close(f(x), running(x), tol=0)
    with pytest.raises(ConfigError, match="no verified kernel"):
        f.run_kernel(x)


# --- the cache ------------------------------------------------------------------------------------------
SCALE = 2.0


def scaled_scores(x, w):
    return jnp.sum(x @ w, axis=1, keepdims=True) * SCALE


SCORE_SHAPES = [((32, 64), "float32"), ((64, 48), "float32")]


def _scores_inputs():
    return jax.random.normal(jax.random.key(3), (32, 64)), jax.random.normal(jax.random.key(4), (64, 48))


def test_changed_global_re_optimises(where, monkeypatch):
    x, w = _scores_inputs()
    first = mk.optimize(scaled_scores, SCORE_SHAPES, **FAST, **where)
    assert first.report.status == "correct", first.report.stop_reason
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    second = mk.optimize(scaled_scores, SCORE_SHAPES, **FAST, **where)
    assert not second.cached and second.report.run_id != first.report.run_id
    # judged against the new function's outputs, not outputs cached for the old one (same source text)
    assert second.report.status == "correct", second.report.stop_reason
    _close(_no_warning(lambda: second(x, w)), scaled_scores(x, w))
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 2.0)
    again = mk.optimize(scaled_scores, SCORE_SHAPES, **FAST, **where)
    assert again.cached and again.report.run_id == first.report.run_id
    _close(again(x, w), scaled_scores(x, w))


def _closure(scale):
    def scores(x, w):
        return jnp.sum(x @ w, axis=1, keepdims=True) * scale

    return scores


def test_closure_value_re_optimises(where):
    x, w = _scores_inputs()
    two, three = _closure(2.0), _closure(3.0)
    a = mk.optimize(two, SCORE_SHAPES, **FAST, **where)
    b = mk.optimize(three, SCORE_SHAPES, **FAST, **where)
    assert a.report.status == b.report.status == "correct", (a.report.stop_reason, b.report.stop_reason)
    assert not b.cached and b.report.run_id != a.report.run_id
    _close(a(x, w), two(x, w))
    _close(b(x, w), three(x, w))
    assert mk.optimize(_closure(2.0), SCORE_SHAPES, **FAST, **where).cached  # a new closure, the same computation


def test_cache_key_follows_constants_not_source_text():
    def closure_over(table):
        def f(x):
            return x * table

        return f

    def key(fn, shapes=((8, 128), "float32")):
        task, spec = callable_task(fn, shapes, computation_key=True)
        return cache_key(task, "cpu", spec)

    ones = np.ones((8, 128), np.float32)
    assert key(closure_over(jnp.asarray(ones))) == key(closure_over(jnp.asarray(ones.copy())))
    assert key(closure_over(jnp.asarray(ones))) != key(closure_over(jnp.asarray(ones * 2)))  # the constant's bytes
    assert key(lambda x: x * 2.0) != key(lambda x: x * 3.0)
    assert key(lambda x: x * 2.0) == key(lambda x: x * (1.0 + 1.0))  # other source text, the same computation
    assert key(lambda x: x * 2.0) != key(lambda x: x * 2.0, ((16, 128), "float32"))
    t1, _ = callable_task(lambda x: x * 2.0, ((8, 128), "float32"), computation_key=True)
    t2, _ = callable_task(lambda x: x * 3.0, ((8, 128), "float32"), computation_key=True)
    assert t1.fingerprint() != t2.fingerprint()  # so the judge's cached reference outputs are not shared


def test_unknown_keyword_is_rejected_on_a_cache_hit_too(fast, where):
    again = mk.optimize(head, HEAD_SHAPES, static_argnames=("reduce",), **FAST, **where)
    assert again.cached
    with pytest.raises(ArgumentError, match=r"mk.optimize\(\) got unknown keyword argument\(s\) 'iteratons' \(did you mean 'iterations'\?\)"):
        mk.optimize(head, HEAD_SHAPES, static_argnames=("reduce",), iteratons=3, **{**FAST, "iterations": 1}, **where)


# --- optimise-time errors and binding ------------------------------------------------------------------
def test_optimise_time_errors_say_what_to_do():
    def f(x, temperature, b):
        return x * temperature + b

    task, spec = callable_task(f, [((4, 128), "float32"), ((128,), "float32")], static={"temperature": 2.0})
    assert [a.name for a in task.args] == ["x", "b"] and spec.static_names == ("temperature",)  # statics are skipped
    x, b = task.make_inputs()
    np.testing.assert_allclose(np.asarray(task.bind(task.reference)(x, b)), x * 2.0 + b)
    with pytest.raises(TaskError, match="is the Python float 0.5, not a shape") as err:
        callable_task(f, [((4, 128), "float32"), 0.5, ((128,), "float32")])
    assert "static" in str(err.value)
    with pytest.raises(TaskError, match="'temp' are not parameters of f"):
        callable_task(f, [((4, 128), "float32"), ((128,), "float32")], static={"temp": 1.0})
    with pytest.raises(TaskError, match="static argument 'temperature' has no value"):
        callable_task(f, [((4, 128), "float32"), ((128,), "float32")], static_argnames=("temperature",))
    with pytest.raises(TaskError, match="3 positional inputs given, f\\(\\) takes 2"):
        callable_task(f, [((4, 128), "float32")] * 3, static={"temperature": 2.0})
    with pytest.raises(TaskError, match="cannot read a shape and dtype for input 'p.w'"):
        callable_task(lambda p: p["w"], [{"w": (4, 128)}])


def test_help_documents_every_argument():
    doc = inspect.getdoc(mk.optimize)
    params = [p for p in inspect.signature(mk.optimize).parameters.values() if p.kind is not p.VAR_KEYWORD]
    undocumented = [p.name for p in params if not re.search(rf"^({p.name}|.*, {p.name}|{p.name},.*)$", doc, re.M)]
    assert not undocumented, undocumented
    job = [p for p in inspect.signature(mk.optimize_task).parameters if p != "task"]
    assert set(job) <= {p.name for p in params}, set(job) - {p.name for p in params}  # everything the job takes


def test_readme_python_api_example_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    found = re.search(r"<!-- mk:python-api-example -->\n```python\n(.*?)```", text, re.S)
    assert found, "the README's Python API example (marked <!-- mk:python-api-example -->) is missing"
    monkeypatch.chdir(tmp_path)  # it writes mk-out/ and uses the store of this test's MK_HOME
    exec(compile(found.group(1), str(README), "exec"), {"__name__": "__readme__"})  # noqa: S102 - our README
    out = capsys.readouterr().out
    assert out.startswith("correct\n") and "static reduce: 'sum'" in out
    assert out.count("running the reference") == 3 and "EnvelopeError" in out
    assert isinstance(MkError, type)


def test_a_shape_branch_inside_the_envelope_runs_the_reference(tmp_path):
    """A function that branches on a shape computes another program past the branch: the kernel verified before it
    must not run there, even where the envelope's size rule would allow it (found by a newcomer, 2026-12-01)."""
    import warnings

    import jax.numpy as jnp
    import numpy as np

    from mk.api import OptimizedFunction
    from mk.harness import build_suite
    from mk.harness.envelope import Envelope
    from mk.job import OptimizeReport
    from mk.loaders.callable import callable_task

    def f(x, w):
        s = (x @ w).sum(axis=1)
        return s * 2.0 if x.shape[0] > 100 else s

    task, spec = callable_task(f, [((32, 64), "float32"), ((64, 48), "float32")], computation_key=True)
    env = Envelope.of(task, build_suite(task))
    assert env.check([(128, 64), (64, 48)]) is None  # the size rule alone would allow 128 rows
    report = OptimizeReport("correct", None, task.name, "cpu", env.suite_hash, None, None, None, "", "hand", None, [], {},
                            envelope=env.to_dict())
    kernel = "def kernel(x, w):\n    return (x @ w).sum(axis=1)\n"  # right below the branch only
    fast = OptimizedFunction(f, task, report, kernel, spec=spec)
    w = jnp.ones((64, 48), jnp.float32)
    small = jnp.asarray(np.random.default_rng(0).standard_normal((64, 64)), jnp.float32)
    assert fast.reason(small, w) is None and float(jnp.max(jnp.abs(fast(small, w) - f(small, w)))) == 0.0
    big = jnp.asarray(np.random.default_rng(1).standard_normal((128, 64)), jnp.float32)
    assert "different program" in fast.reason(big, w)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert float(jnp.max(jnp.abs(fast(big, w) - f(big, w)))) == 0.0
