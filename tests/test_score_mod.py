"""Attention whose scores the reference modifies (mk/author/score_mod.py through the attention-core recogniser,
mk/author/mla.py): a soft cap, a boolean key-padding mask, a sliding window, a bias plus a mask, heads split from
(B, S, D), q pre-scaled in (B, S, H, D), RoPE on q and k, rank-3 (one head) attention. Each is recognised, its written kernel matches the reference
in interpret mode and lowers for the chip; the plain templates decline what they cannot write (a soft cap used to pass
their float32 probe, then fail the judge at large magnitudes).

These functions are this file's own (written for the tests, in the shapes of model code); the held-out user
functions of tests/user_functions/ are never used to build or tune the recognisers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.author import OfflineAuthor, attention, score_mod
from mk.author.emit import Unsupported
from mk.author.ir import from_jaxpr
from mk.author.trace import trace_scales
from mk.harness.program import low_precision_kernel_dots
from mk.loaders.callable import task_from_callable
from mk.targets import get_target


def softcapped(q, k, v):
    """(B, H, S, D) f32, causal, logits capped at 20 (Grok/Gemma style), finfo.min fill."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = 20.0 * jnp.tanh(s / 20.0)
    keep = jnp.tril(jnp.ones((q.shape[2], k.shape[2]), bool))
    s = jnp.where(keep, s, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def padded_heads(xq, xk, xv, keep):
    """(B, S, D) bf16 with 4 heads split inside, a (B, S) boolean key mask filled with -1e9."""
    b, n, d = xq.shape
    split = lambda x: x.reshape(b, x.shape[1], 4, d // 4).transpose(0, 2, 1, 3)  # noqa: E731
    s = jnp.einsum("bhqd,bhkd->bhqk", split(xq), split(xk), preferred_element_type=jnp.float32) * (d // 4) ** -0.5
    s = jnp.where(keep[:, None, None, :], s, -1e9)
    o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1).astype(xv.dtype), split(xv))
    return o.transpose(0, 2, 1, 3).reshape(b, n, d)


def windowed(q, k, v):
    """(B, H, S, D) f32, causal with a 48-key window (Mistral style)."""
    i, j = jnp.arange(q.shape[2])[:, None], jnp.arange(k.shape[2])[None, :]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125
    s = jnp.where((j <= i) & (j > i - 48), s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def bias_and_mask(q, k, v, rel, keep):
    """(B, H, S, D) f32 with a learned (H, S, S) relative bias and a (B, S) key mask."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125 + rel[None]
    s = jnp.where(keep[:, None, None, :], s, -1e30)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def _rotate(x, cos, sin):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def rope_bshd(q, k, v, cos, sin):
    """(B, S, H, D) bf16 with rotary embeddings on q and k (rotate_half via split), q pre-scaled, causal."""
    q = _rotate(q, cos, sin) * q.shape[-1] ** -0.5
    k = _rotate(k, cos, sin)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    s = jnp.where(jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool)), s, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1).astype(v.dtype), v)


def single_head_masked(q, k, v, keep):
    """Rank 3: (B, S, D) f32, one head, a (B, S) key mask (a pooling attention, a pointer network)."""
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(keep[:, None, :], s, -1e9)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)


def single_head_causal_t(q, k, v):
    """Rank 3, causal, the output (B, D, S) (keys times probabilities written v-first)."""
    s = jnp.einsum("bqd,bkd->bqk", q, k) * 0.125
    s = jnp.where(jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool)), s, -jnp.inf)
    return jnp.einsum("bkd,bqk->bdq", v, jax.nn.softmax(s, axis=-1))


def projected_cross(x, ctx, wq, wk, wv, keep):
    """f32 cross-attention with projections (96 queries over 40 context tokens, 2 heads) and a (B, 40) mask."""
    b, n, _ = x.shape
    heads = lambda t: t.reshape(b, t.shape[1], 2, -1).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(x @ wq), heads(ctx @ wk), heads(ctx @ wv)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125
    s = jnp.where(keep[:, None, None, :], s, -1e9)
    o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
    return o.transpose(0, 2, 1, 3).reshape(b, n, -1)


F32, BF16 = "float32", "bfloat16"
BHSD = ((1, 2, 128, 64), F32)
CASES = {
    "softcapped": (softcapped, [BHSD] * 3),
    "padded_heads": (padded_heads, [((2, 128, 128), BF16)] * 3 + [((2, 128), "bool")]),
    "windowed": (windowed, [BHSD] * 3),
    "bias_and_mask": (bias_and_mask, [BHSD] * 3 + [((2, 128, 128), F32), ((1, 128), "bool")]),
    "rope_bshd": (rope_bshd, [((1, 128, 2, 64), BF16)] * 3 + [((128, 1, 64), BF16)] * 2),
    "single_head_masked": (single_head_masked, [((2, 128, 64), F32)] * 3 + [((2, 128), "bool")]),
    "single_head_causal_t": (single_head_causal_t, [((2, 128, 64), F32)] * 3),
    "projected_cross": (projected_cross, [((2, 96, 64), F32), ((2, 40, 48), F32), ((64, 128), F32),
                                          ((48, 128), F32), ((48, 128), F32), ((2, 40), "bool")]),
}


def _task(name):
    fn, shapes = CASES[name]
    return task_from_callable(fn, scales={"ci": shapes}, name=name)


def _f32(xs):
    return [np.asarray(x, np.float32) if np.issubdtype(np.asarray(x).dtype, np.floating)
            or np.asarray(x).dtype.name == "bfloat16" else x for x in xs]


def _check(task, source, target, dists=("normal", "large_magnitude")):
    """The written kernel against the reference run on float32 copies, as the judge compares: within the task's
    tolerance on a random case, within 5% of the output's scale on one with outliers (float32 scores that large make
    softmax sensitive to rounding; a cap left out is off by far more), or within twice the reference's own error at
    its dtype."""
    ns: dict = {}
    exec(compile(source, "candidate", "exec"), ns)  # noqa: S102 - the written kernel under test
    atol, rtol = task.tolerance.for_output(0)
    ref_fn = jax.jit(task.bind(task.reference, "ci"))
    for k, dist in enumerate(dists):
        xs = task.make_inputs("ci", 3 + k, dist)
        want = np.asarray(ref_fn(*_f32(xs)), np.float64)
        own = float(np.abs(np.asarray(ref_fn(*xs), np.float64) - want).max())
        with get_target(target).execution():
            got = np.asarray(jax.jit(task.bind(ns["kernel"], "ci"))(*xs), np.float64)
        scale = float(np.abs(want).max())
        bound = max(atol + rtol * scale if dist == "normal" else 0.05 * scale, 2 * own)
        err = float(np.abs(got - want).max())
        assert err <= bound, f"{task.name} {target} {dist}: error {err:.3g} over {bound:.3g}"
    get_target(target).lower(task.bind(ns["kernel"], "ci"), *task.arg_structs("ci"))
    if task.args[0].dtype == "float32":  # the judge refuses a float32 product in a kernel at less than HIGHEST
        closed = jax.make_jaxpr(task.bind(ns["kernel"], "ci"))(*task.arg_structs("ci"))
        assert not low_precision_kernel_dots(closed.jaxpr), task.name


@pytest.mark.parametrize("target", ["tpu", "gpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_modified_scores_are_written_matched_and_lowered(name, target):
    task = _task(name)
    made = OfflineAuthor().propose(task, target)
    props = [p for p in made.proposals if p.template == "mla"]
    assert [p.name for p in props] == [f"attention-core-{target}", f"attention-core-{target}-resident"], made.declined
    for prop in props:  # both block schedules
        _check(task, prop.source, target)


def test_the_soft_cap_and_masks_are_in_the_tile_function():
    task = _task("bias_and_mask")
    src = next(p.source for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "mla")
    assert "def _score_mod(s, t0, t1):" in src and "t1 = t1 != 0" in src  # the bias, then the boolean mask
    assert "causal=False" in src and "mod=_score_mod" in src
    capped = next(p.source for p in OfflineAuthor().propose(_task("softcapped"), "tpu").proposals
                  if p.template == "mla")
    assert "jnp.tanh(" in capped


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_plain_templates_decline_a_soft_cap(target):
    """The flash-attention template used to accept a soft cap: on normal inputs tanh(s / c) * c is s."""
    task = _task("softcapped")
    with pytest.raises(Unsupported, match="tanh"):
        attention.propose(task, trace_scales(task), target)


def test_the_modification_read_from_the_jaxpr():
    task = _task("bias_and_mask")
    prog = from_jaxpr(trace_scales(task)[0].jaxpr)
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    mod = score_mod.find(prog, dots[0], dots[1])
    assert [op.prim for op in mod.ops] == ["mul", "add", "select_n"]
    assert [b.arg for b in mod.bases] == [3, 4]  # rel and keep, at their own sizes
    assert mod.steps[1][-1] == "x = x.astype(jnp.float32)"  # the boolean mask travels as float32


def test_a_reduction_on_the_scores_is_not_a_modification():
    def f(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        s = s - jnp.mean(s, axis=-1, keepdims=True)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    task = task_from_callable(f, scales={"ci": [BHSD] * 3}, name="centred")
    made = OfflineAuthor().propose(task, "tpu")
    assert not [p for p in made.proposals if p.template == "mla"]
    assert "not elementwise" in made.declined["mla"]


# --- found by a kernel engineer who attacked this path (2026-12-07): each was wrong, or crashed, before its fix -----


def _kernel_calls():
    from mk.kernels.flash_attention import SCHEDULES

    return [(target, fn) for tpu, gpu in SCHEDULES.values() for target, fn in (("tpu", tpu), ("gpu", gpu))]


@pytest.mark.parametrize("fill", [float(np.finfo(np.float32).min), -np.inf])
def test_a_wholly_masked_row_is_what_softmax_makes_it(fill):
    """A fill below the kernels' -1e30 (finfo.min) on a row masked wholly: softmax makes it uniform (the mean of v);
    the kernels gave NaN (their running max started at -1e30), and Triton's padded keys (Sk = 200) won the row.
    With -inf everywhere softmax gives NaN, and so must the kernel."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 2, 128, 64)), jnp.float32) for _ in range(3))
    k, v = k[:, :, :100].repeat(2, axis=2), v[:, :, :100].repeat(2, axis=2)  # Sk = 200: Triton pads it
    keep = np.ones((2, 1, 1, 200), np.float32)
    keep[1] = 0.0  # batch 1 masked wholly

    def mod(s, t):
        return jnp.where(t != 0, s * 0.125, fill)

    ref = jax.nn.softmax(mod(jnp.einsum("bhqd,bhkd->bhqk", q, k), jnp.asarray(keep)), axis=-1)
    want = np.asarray(jnp.einsum("bhqk,bhkd->bhqd", ref, v))
    for target, fn in _kernel_calls():
        with get_target(target).execution():
            got = np.asarray(fn(q, k, v, (jnp.asarray(keep),), scale=1.0, causal=False, mod=mod))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{target} {fn.__name__}")
        np.testing.assert_allclose(got[0], want[0], atol=1e-4, rtol=1e-4, err_msg=f"{target} {fn.__name__}")
        if np.isfinite(fill):
            np.testing.assert_allclose(got[1], want[1], atol=1e-4, rtol=1e-4, err_msg=f"{target} {fn.__name__}")


def test_a_mask_input_shaped_like_the_scores_is_written():
    """A (B, H, S, S) mask input is a side as it is; writing it cleared its input index (a TypeError in mk.optimize)."""
    def full_mask(q, k, v, m):
        s = jnp.where(m, jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    task = task_from_callable(full_mask, scales={"ci": [BHSD] * 3 + [((1, 2, 128, 128), "bool")]}, name="full_mask")
    props = [p for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "mla"]
    assert props
    _check(task, props[0].source, "tpu")


def test_a_mask_reshaped_at_a_batch_of_one_runs_at_other_batches():
    """keep.reshape(b, 1, 1, s) authored at B = 1 was written with a literal 1 for the batch: other batches crashed."""
    def padded(q, k, v, keep):
        b, s = keep.shape
        sc = jnp.where(keep.reshape(b, 1, 1, s), jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(sc, axis=-1), v)

    task = task_from_callable(padded, scales={"ci": [BHSD] * 3 + [((1, 128), "bool")]}, name="padded")
    src = next(p.source for p in OfflineAuthor().propose(task, "tpu").proposals if p.template == "mla")
    ns: dict = {}
    exec(compile(src, "candidate", "exec"), ns)  # noqa: S102 - the written kernel under test
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(3, 2, 128, 64)), jnp.float32) for _ in range(3))
    keep = jnp.asarray(rng.integers(0, 2, size=(3, 128)).astype(bool))
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(ns["kernel"])(q, k, v, keep))
    np.testing.assert_allclose(got, np.asarray(padded(q, k, v, keep)), atol=1e-4, rtol=1e-4)


def test_a_window_wider_than_the_authoring_sequence_is_not_causal():
    """A 256-key window at S = 128 is causal there and only there: the plain template wrote it causal (off by 0.45
    at S = 512); the mask is now checked at every size the probes traced, and the attention core writes it."""
    def wide(q, k, v):
        i, j = jnp.arange(q.shape[2])[:, None], jnp.arange(k.shape[2])[None, :]
        s = jnp.where((j <= i) & (j > i - 256), jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125, -1e30)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    task = task_from_callable(wide, scales={"ci": [BHSD] * 3}, name="wide")
    made = OfflineAuthor().propose(task, "tpu")
    assert "not at every size traced" in made.declined["attention"]
    src = next(p.source for p in made.proposals if p.template == "mla")
    assert "mod=_score_mod" in src
    ns: dict = {}
    exec(compile(src, "candidate", "exec"), ns)  # noqa: S102 - the written kernel under test
    rng = np.random.default_rng(2)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 1, 512, 64)), jnp.float32) for _ in range(3))
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(ns["kernel"])(q, k, v))
    np.testing.assert_allclose(got, np.asarray(wide(q, k, v)), atol=1e-4, rtol=1e-4)


def _bf16_padded(q, k, v, keep):
    s = jnp.where(keep[:, None, None, :], jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1).astype(v.dtype), v)


def _bf16_gqa_capped(q, k, v, keep):
    k, v = jnp.repeat(k, 4, axis=1), jnp.repeat(v, 4, axis=1)
    s = 30.0 * jnp.tanh(jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0 / 30.0)
    s = jnp.where(keep[:, None, None, :], s, jnp.finfo(s.dtype).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1).astype(v.dtype), v)


@pytest.mark.parametrize("fn,kv_heads", [(_bf16_padded, 8), (_bf16_gqa_capped, 2)])
@pytest.mark.parametrize("seed_name", ["first", "second"])
def test_bf16_scores_with_a_mask_are_written_whatever_the_probe_draws(fn, kv_heads, seed_name):
    """bf16 attention with a padding mask (the commonest real form) was declined on some draws: the written tile
    function rounds the scores to bf16, the check ran the reference on float32 copies. The check now runs the
    function's float32 form (the rounding is the judge's to compare)."""
    kv = ((2, kv_heads, 256, 64), BF16)
    task = task_from_callable(fn, scales={"ci": [((2, 8, 256, 64), BF16), kv, kv, ((2, 256), "bool")]},
                              name=f"{fn.__name__}_{seed_name}")
    made = OfflineAuthor().propose(task, "tpu")
    assert [p.template for p in made.proposals] == ["mla", "mla"], made.declined.get("mla")


def bf16_scaled_then_widened(xq, xk, xv, ext_mask):
    """HF-style: bf16 scores divided in bf16, widened to float32, an additive float32 (B, 1, 1, S) mask; heads split
    from (B, S, hidden). Triton has no bf16 division: the tile function divides in float32 and rounds to bf16."""
    b, n, hidden = xq.shape
    split = lambda t: t.reshape(b, n, 4, hidden // 4).transpose(0, 2, 1, 3)  # noqa: E731
    s = jnp.matmul(split(xq), jnp.swapaxes(split(xk), -1, -2)) / float(np.sqrt(hidden // 4))  # bf16 division
    p = jax.nn.softmax(s.astype(jnp.float32) + ext_mask, axis=-1).astype(xv.dtype)
    return jnp.matmul(p, split(xv)).transpose(0, 2, 1, 3).reshape(b, n, hidden)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_16_bit_steps_on_the_scores_run_in_float32_rounded(target):
    shapes = [((2, 96, 128), BF16)] * 3 + [((2, 1, 1, 96), F32)]
    task = task_from_callable(bf16_scaled_then_widened, scales={"ci": shapes}, name="bf16_scaled")
    src = next(p.source for p in OfflineAuthor().propose(task, target).proposals if p.template == "mla")
    assert ".astype(jnp.bfloat16).astype(jnp.float32)" in src  # each bf16 step rounded from float32
    # normal inputs only: at large magnitudes the reference under jit is XLA's fused float32 chain (its bf16 round
    # trips folded away), which the kernel's exact bf16 steps do not follow (off by 166 of 300; open, issue 25)
    _check(task, src, target, dists=("normal",))


# --- CI at 50d6f26: the check above evaluated the mask at the scores' size (4x64x4096x4096 bool, 4 GiB; a held-out
# trace at S = 12288 took the author to 12 GB); it is now one fused, jitted comparison over compact values ----------

KEEPS_AT_FULL_SIZE = '''
import resource, re
import jax, jax.numpy as jnp
from mk.author import score_mod
from mk.author.ir import from_jaxpr

def causal(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    s = jnp.where(jnp.tril(jnp.ones((q.shape[2], k.shape[2]))) != 0, s, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

def window(q, k, v):
    i, j = jnp.arange(q.shape[2])[:, None], jnp.arange(k.shape[2])[None, :]
    s = jnp.where((j <= i) & (j > i - 256), jnp.einsum("bhqd,bhkd->bhqk", q, k), -1e30)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

big = jax.ShapeDtypeStruct((4, 64, 12288, 128), jnp.bfloat16)
got = []
for fn in (causal, window):
    prog = from_jaxpr(jax.make_jaxpr(fn)(big, big, big))
    dots = [i for i, op in enumerate(prog.ops) if op.prim == "dot_general"]
    got.append(score_mod.keeps(score_mod.find(prog, dots[0], dots[1]), True))
with open("/proc/self/status") as f:
    peak = int(re.search(r"VmHWM:\\s*(\\d+) kB", f.read()).group(1)) // 1024
print("GOT", got, peak)
'''


def test_the_mask_check_at_a_full_size_stays_small():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", KEEPS_AT_FULL_SIZE], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("GOT "))
    assert line.startswith("GOT [True, False]")
    assert int(line.split()[-1]) < 1500  # MB: a (12288, 12288) int32 mask alone is 600 MB; 4x64 copies are 150 GB


def test_a_finite_fill_above_minus_1e8_is_computed_not_skipped():
    """GPT-2 masks with -1e4: once real scores fall below it (outlier inputs), the masked future keys win the softmax.
    A kernel that skipped them as causal was 5e7 off on set 3's gpt2 attention (the judge caught it); such a fill is
    now part of the score modification, every key block visited."""
    def gpt2(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125
        s = jnp.where(jnp.tril(jnp.ones((q.shape[2], k.shape[2]), bool)), s, jnp.float32(-1e4))
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    task = task_from_callable(gpt2, scales={"ci": [BHSD] * 3}, name="gpt2_fill")
    made = OfflineAuthor().propose(task, "tpu")
    assert "attention" in made.declined  # the causal-flag template does not take it
    src = next(p.source for p in made.proposals if p.template == "mla")
    assert "mod=_score_mod" in src
    ns: dict = {}
    exec(compile(src, "candidate", "exec"), ns)  # noqa: S102 - the written kernel under test
    rng = np.random.default_rng(4)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 2, 128, 64)) * s, jnp.float32) for s in (100.0, 100.0, 1.0))
    want = np.asarray(gpt2(q, k, v))
    with get_target("tpu").execution():
        got = np.asarray(jax.jit(ns["kernel"])(q, k, v))
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)
