"""Held-out scales and the verified envelope: suites that tell a general kernel from a fitted one, and a written
kernel that refuses to trace outside what it was verified on."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.harness import build_suite, evaluate
from mk.harness.envelope import OUTSIDE, Envelope
import secrets

from mk.errors import TaskError
from mk.harness.heldout import derive, fresh_size, heldout_scales, other_float, sized, unit
from mk.job import Best, with_provenance
from mk.loaders import load_task, task_from_callable
from mk.targets import get_target
from mk.task import ArgSpec, Scale, StaticArg, Task, Tolerance

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rmsnorm.py"


def rms(x, w, eps):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps) * w).astype(x.dtype)


def rms_task(**kw) -> Task:
    return Task("rms", rms, (ArgSpec("x", ("m", "n"), "float32"), ArgSpec("w", ("n",), "float32")),
                {"ci": Scale("ci", {"m": 16, "n": 256})}, static=(StaticArg("eps", 1e-6),),
                tolerance=Tolerance(1e-4, 1e-4), **kw)


def src(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


GENERAL = src("""
    import jax
    import jax.numpy as jnp

    def kernel(x, w, eps):
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt(jnp.sum(x32 * x32, axis=-1, keepdims=True) / x.shape[-1] + eps) * w).astype(x.dtype)
""")
#: divides by the hidden size it was shown and ignores eps, as the first round's written kernels did
FITTED = src("""
    import jax
    import jax.numpy as jnp

    def kernel(x, w, eps):
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt(jnp.sum(x32 * x32, axis=-1, keepdims=True) / 256.0 + 1e-6) * w).astype(x.dtype)
""")
FITTED_EPS = GENERAL.replace("+ eps)", "+ 1e-6)")


# --- derivation -----------------------------------------------------------------------------
def test_unit_and_float_moves():
    assert unit([256]) == 128 and unit([512, 8192]) == 128 and unit([16]) == 16 and unit([6, 10]) == 2 and unit([3]) == 1
    assert other_float(1e-5) == 0.25 and other_float(2.0) == 4.0 and other_float(-10.0) == -20.0


def test_derived_scale_keeps_divisibility_and_moves_statics():
    task = load_task("jaxbench:12p_RMSNorm")
    (held,) = heldout_scales(task)
    judged = task.with_scales({**task.scales, held.name: held})
    assert judged.shapes(held.name) == [(4, 32, 640), (640,)]  # ci (2, 16, 512): each dim grows by its unit
    assert judged.static_values(held.name) == [0.25]  # epsilon 1e-5 moves far enough to change the result
    assert held.name not in task.scales


def test_int_static_follows_its_dim_and_axes_move_together():
    attn = load_task("jaxbench:4p_Sparse_Attention")
    (held,) = heldout_scales(attn)
    judged = attn.with_scales({**attn.scales, held.name: held})
    base = dict(zip([s.name for s in attn.static], attn.static_values("ci")))
    moved = dict(zip([s.name for s in attn.static], judged.static_values(held.name)))
    assert base["S"] == attn.shapes("ci")[0][2] and moved["S"] == judged.shapes(held.name)[0][2] != base["S"]

    def mm(x, w):
        return x @ w

    task = task_from_callable(mm, [((64, 256), "float32"), ((256, 128), "float32")])
    held = derive(task)
    assert held.shapes == ((128, 384), (384, 256))  # the two K axes stay equal


def test_moves_the_reference_refuses_are_dropped():
    def fixed_width(x):
        assert x.shape[-1] == 256, "this layer is 256 wide"
        return x * 2

    task = task_from_callable(fixed_width, [((8, 256), "float32")], check=False)
    held = derive(task)
    assert held.shapes == ((16, 256),)  # the width the reference insists on is kept, the rows still move
    pinned = dataclasses.replace(rms_task(), dim_units={"m": 0, "n": 0}, vary_static={"eps": None})
    assert heldout_scales(pinned) == ()
    assert heldout_scales(dataclasses.replace(rms_task(), heldout=())) == ()


def test_dims_equal_by_coincidence_at_the_authoring_size_are_parted():
    # K = N = 256 at ci: the held-out size gives them different sizes, so the envelope does not tie them
    def mm(x, w):
        return x @ w.T

    args = (ArgSpec("x", ("M", "K"), "float32"), ArgSpec("w", ("N", "K"), "float32"))
    task = Task("mm_kn", mm, args, {"ci": Scale("ci", {"M": 64, "K": 256, "N": 256})})
    held = derive(task)
    assert held.dims["K"] != held.dims["N"] and held.dims["M"] == 128
    suite = build_suite(task, seeds=(0,), distributions=("normal",))
    env = Envelope.of(task, suite)
    assert env.equal == (((0, 1), (1, 1)),)  # K with K only
    assert env.check([(64, 256), (512, 256)]) is None

    def square(x, w):  # the reference needs N = K (it adds x to the product): they move together
        return x @ w.T + x

    tied = derive(dataclasses.replace(task, reference=square))
    assert tied.dims["K"] == tied.dims["N"]


def test_suite_hash_covers_the_heldout_scales():
    task = rms_task()
    a = build_suite(task)
    b = build_suite(dataclasses.replace(task, dim_units={"n": 64}))
    assert a.heldout_names == ("heldout",) and [c for c in a.cases if c.scale == "heldout"]
    assert a.hash != b.hash and "heldout" not in task.scales
    assert build_suite(task).hash == a.hash
    assert build_suite(task, heldout=False).heldout == ()


# --- the judge ------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [FITTED, FITTED_EPS], ids=["hidden-size", "eps"])
def test_fitted_kernels_fail_the_heldout_case(tmp_path, source):
    res = evaluate(rms_task(), source, target="cpu", measure=False)
    assert res.status == "incorrect", res.reason
    assert "heldout" in res.reason and res.failed_case.startswith("heldout-")


def test_general_kernel_is_correct_and_its_envelope_says_what_was_verified():
    task = rms_task()
    res = evaluate(task, GENERAL, target="cpu", measure=False)
    assert res.status == "correct", res.reason
    env = Envelope.from_dict(res.envelope)
    assert env.heldout == ("heldout",) and env.cases == len(build_suite(task).cases)
    assert env.check([(48, 384), (384,)], ["float32", "float32"], {"eps": 1e-3}) is None
    assert "multiple of 128" in env.check([(16, 200), (200,)])
    assert "equal" in env.check([(16, 384), (256,)])
    assert "float32" in env.check([(16, 256), (256,)], ["bfloat16", "float32"])
    assert "rank" in env.check([(2, 16, 256), (256,)])
    assert env.check([(16, 256), (256,)], static={"eps": "big"}) is not None
    words = "\n".join(env.lines())
    assert "x: float32[any multiple of 16 from 16 to 80" in words and "static eps: any number from 1e-06 to 0.25" in words
    assert "multiple of 128 from 256" in env.check([(16, 2048), (2048,)])  # beyond anything judged: not claimed
    assert "static eps=1.0" in env.check([(16, 256), (256,)], static={"eps": 1.0})  # nor beyond the judged values
    assert env.check([(16, 256), (256,)], static={"eps": np.float32(0.1)}) is None


def _written(task: Task, suite, source: str, path: Path) -> Path:
    env = Envelope.of(task, suite)
    best = Best(source, "correct", None, "hand-written", {}, "")
    path.write_text(with_provenance(best, task, suite.hash, get_target("cpu"), env))
    return path


def test_written_kernel_is_correct_elsewhere_in_its_envelope_and_refuses_outside(tmp_path):
    task = rms_task()
    kernel = _written(task, build_suite(task), GENERAL, tmp_path / "k.py")
    text = kernel.read_text()
    assert "# envelope (outside it the kernel raises a ValueError when traced):" in text and "MK_ENVELOPE" in text
    # a copy judged at sizes inside the envelope only (its own held-out sizes would lie beyond it)
    inside = dataclasses.replace(task.with_scales({"other": Scale("other", {"m": 48, "n": 512}, static={"eps": 1e-2})}),
                                 heldout=())
    res = evaluate(inside, kernel, target="cpu", measure=False)
    assert res.status == "correct", res.reason
    # judged with held-out and fresh sizes of its own, it is correct where they fall inside and refuses the rest
    res = evaluate(task.with_scales({"other": Scale("other", {"m": 48, "n": 384})}), kernel, target="cpu", measure=False)
    assert res.status in ("correct", "outside_envelope"), res.reason
    outside = task.with_scales({"odd": Scale("odd", {"m": 16, "n": 200})})
    res = evaluate(outside, kernel, target="cpu", measure=False)
    assert res.status == "outside_envelope" and OUTSIDE in res.reason and "[1] is 200" in res.reason


def test_written_header_lines_fit_in_100_characters_and_say_the_same():
    """Issue 24, item 5: the header's envelope and chip-compile lines ran to 330 characters; wrapped, each line is a
    comment of at most 100 characters with the same words, and the guard after it still declares its envelope."""
    import ast

    from mk.harness.envelope import declared_rule
    from mk.harness.results import CompileResult, KernelFigures, compile_lines

    task = rms_task()
    suite = build_suite(task)
    env = Envelope.of(task, suite)
    lim = {"scoped_vmem_bytes": 16 << 20}
    compiled = [CompileResult(chip="v5e", scale=s, ok=True, limits=lim, kernels=[KernelFigures(name="k", scoped_vmem_bytes=1 << 20)])
                for s in ("ci", "heldout", "size-16x256", "size-32x384", "size-48x512", "size-64x640", "size-80x768")]
    compiled.append(CompileResult(chip="v5e", scale="full", ok=False, judged=False, limits=lim,
                                  error="RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem while allocating " * 3))
    best = Best(GENERAL, "correct", None, "hand-written", {"block_rows": 16}, "",
                compile_check="v5e: every scale compiled by libtpu without the chip (the chip's own compiler)",
                compiled=compiled)
    text = with_provenance(best, task, suite.hash, get_target("tpu"), env)
    header = text[:text.index("\nimport")].splitlines()
    assert header and all(line.startswith("#") and len(line) <= 100 for line in header), \
        [line for line in header if len(line) > 100]
    longest = max(len(w) for w in env.lines() + compile_lines(compiled))
    assert longest > 150  # the lines this test is about were long before they were wrapped
    words = " ".join(line.lstrip("#").strip() for line in header)
    for line in env.lines() + compile_lines(compiled):
        assert " ".join(line.split()) in words, line  # the same words, in order
    mk_comments = [line for line in text.splitlines() if line.startswith("# ---")]  # the tuned config's, the guard's
    assert len(mk_comments) == 2 and all(len(line) <= 100 for line in mk_comments)
    ast.parse(text)
    assert declared_rule(text) is not None  # the guard after the header is read as before


def test_an_eps_the_suite_never_varied_is_pinned(tmp_path):
    task = dataclasses.replace(rms_task(), vary_static={"eps": None})
    kernel = _written(task, build_suite(task), FITTED_EPS, tmp_path / "k.py")
    other = task.with_scales({"ci": Scale("ci", {"m": 16, "n": 256}, static={"eps": 0.5})})
    res = evaluate(other, kernel, target="cpu", measure=False)
    assert res.status == "outside_envelope" and "static eps=0.5" in res.reason, res.reason


def test_every_evaluation_adds_a_fresh_size_within_the_rule():
    from mk.harness.heldout import FRESH

    task = rms_task()
    seen = set()
    for _ in range(8):
        f = fresh_size(task, secrets)
        (m, n), (n2,) = f.shapes
        assert n == n2 and m % 16 == 0 and n % 128 == 0 and m not in (16, 32) and n not in (256, 384)
        assert sized(task, f.name).shapes == f.shapes and f.name.startswith(FRESH)
        seen.add(f.name)
    assert len(seen) > 1  # drawn, not fixed
    # a kernel right at the suite's sizes only is caught by the size nobody could know in advance
    source = GENERAL.replace("return (", "ok = x.shape[-1] in (256, 384)\n    return (").replace(
        "/ x.shape[-1]", "/ (x.shape[-1] if ok else 256)")
    res = evaluate(rms_task(), source, target="cpu", measure=False)
    assert res.status == "incorrect" and res.failed_case.startswith(FRESH), res.reason


def test_mk_eval_reproduces_a_failed_case(tmp_path):
    cand = tmp_path / "fitted.py"
    cand.write_text(FITTED)
    cmd = [sys.executable, "-m", "mk", "eval", str(EXAMPLE), str(cand), "--scale", "ci", "--no-time"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1 and "reproduce this case: mk eval" in first.stdout, first.stdout + first.stderr
    key = first.stdout.split("--case ", 1)[1].split()[0]
    again = subprocess.run(cmd + ["--case", key, "--json"], capture_output=True, text=True, timeout=600)
    verdict = json.loads(again.stdout)
    assert verdict["status"] == "incorrect" and verdict["failed_case"] == key
    assert [c["key"] for c in verdict["cases"]][:1] == [key]
    bad = subprocess.run(cmd + ["--case", "nowhere-s1-normal"], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "no case 'nowhere-s1-normal'" in bad.stderr


# --- what the attack on the envelope found (tests/adversarial/README.md, round 4) ----------------------------------
def test_an_int_static_equal_to_a_dim_stays_tied_to_it():
    task = load_task("jaxbench:49k_Matmul_AvgPool_GELU_Scale_Max")
    task = task.with_scales({"ci": task.scale("ci")})  # B = pool_kernel_size = 16 there, by chance
    env = Envelope.of(task, build_suite(task))
    pool = next(s for s in env.static if s.name == "pool_kernel_size")
    assert pool.kind == "axis" and pool.axis == (0, 0)
    shapes = task.shapes("ci")
    assert "pool_kernel_size=16" in env.check([(32, shapes[0][1]), *shapes[1:]], static={"pool_kernel_size": 16})
    assert env.check([(32, shapes[0][1]), *shapes[1:]], static={"pool_kernel_size": 32}) is None


def test_declared_heldout_sizes_are_claimed_only_where_judged():
    task = load_task("jaxbench:13p_Cross_Entropy")
    task = task.with_scales({"ci": task.scale("ci")})
    env = Envelope.of(task, build_suite(task))
    assert env.exact and fresh_size(task, secrets) is None
    (h, w, lab) = task.shapes("ci")
    assert env.check([h, w, lab]) is None
    assert "not one of the verified points" in env.check([(h[0] * 2, h[1]), w, (lab[0] * 2,)]) or \
        "one of" in env.check([(h[0] * 2, h[1]), w, (lab[0] * 2,)])
    with pytest.raises(TaskError, match="draws no fresh sizes"):
        sized(task, "size-48x128_128x1000_48")


def test_fresh_sizes_stay_inside_the_envelope_and_their_names_reproduce_them():
    def mm(x, w):
        return x @ w

    task = task_from_callable(mm, [((256, 256), "float32"), ((256, 256), "float32")])  # M = K = N by chance
    env = Envelope.of(task, build_suite(task))
    for _ in range(20):
        f = fresh_size(task, secrets)
        assert env.check(list(f.shapes), ["float32", "float32"]) is None, f.name
        assert sized(task, f.name).shapes == f.shapes
    rms = rms_task()
    f = fresh_size(rms, secrets)
    assert "~eps=" in f.name and sized(rms, f.name).static == f.static  # the drawn eps travels in the name
    for bad in ("size-16x200_200", "size-16x256", "size-scalar_256", "size-16x99999_99999", "size-16x384_384~eps=9.0"):
        with pytest.raises(TaskError):
            sized(rms, bad)


def test_the_written_guard_reads_statics_either_way_and_round_trips_tuples(tmp_path):
    from mk.harness.static import check_source

    def sum_axes(x, axes):
        return jnp.sum(x, axis=axes)

    task = task_from_callable(sum_axes, [((16, 256), "float32")], static={"axes": (1,)})
    env = Envelope.from_dict(Envelope.of(task, build_suite(task)).to_dict())
    assert env.check([(16, 256)], static={"axes": (1,)}) is None and env.check([(16, 256)], static={"axes": (0,)})
    best = Best("import jax.numpy as jnp\n\ndef workload(x, axes):\n    return jnp.sum(x, axis=axes)\n", "correct", None, "hand",
                {}, "")
    text = with_provenance(best, task, "0" * 64, get_target("cpu"), env)
    assert check_source(text, target="cpu", require_pallas=False).ok
    namespace: dict = {}
    exec(compile(text, "k.py", "exec"), namespace)
    x = jnp.ones((16, 256))
    assert namespace["workload"](x, (1,)).shape == (16,)
    with pytest.raises(ValueError, match=OUTSIDE):
        namespace["workload"](x, (0,))
    with pytest.raises(ValueError, match=OUTSIDE):
        namespace["workload"](x, axes=(0,))  # given by keyword to a positional task: still checked
    rms = rms_task()
    text = with_provenance(Best(GENERAL, "correct", None, "hand", {}, ""), rms, "0" * 64, get_target("cpu"),
                           Envelope.of(rms, build_suite(rms)))
    exec(compile(text, "r.py", "exec"), namespace)
    y = jnp.ones((16, 256))
    assert namespace["kernel"](y, jnp.ones(256), np.float32(1e-3)).shape == (16, 256)
    with pytest.raises(ValueError, match="static eps"):
        namespace["kernel"](y, jnp.ones(256), eps=1.0)
