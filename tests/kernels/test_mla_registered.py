"""The attention-core recogniser (mk.author.mla) as a registered template, on a tiny multi-head latent attention
(3p's structure at toy sizes): the offline author proposes it, the written program matches the reference in
interpret mode, and the judge's rule 15 holds on it in-process (every kernel changes the result or feeds one that
does, program.kernel_feeds; the FLOPs outside kernels are a small share of the reference's). Plain attention on
inputs stays the attention template's, and the correctness probe runs at the task's smallest scale."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from mk.author import OfflineAuthor, mla
from mk.author.trace import trace_scales
from mk.harness import program
from mk.loaders import load_task
from mk.task import ArgSpec, Init, Scale, StaticArg, Task, Tolerance
from mk.targets import get_target


def _rope(u, cos, sin):
    half = u.shape[-1] // 2
    u1, u2 = u[..., :half], u[..., half:]
    return jnp.concatenate([u1 * cos - u2 * sin, u2 * cos + u1 * sin], axis=-1)


def _mla(x, wqd, wqu, wkvd, wku, wvu, wo, heads, nope, rope, vdim, lora):
    b, s, _ = x.shape
    q = jnp.dot(jnp.dot(x, wqd), wqu).reshape(b, s, heads, nope + rope)
    kv = jnp.dot(x, wkvd)
    latent, k_rope = kv[..., :lora], kv[..., lora:]
    k_rope = jnp.broadcast_to(k_rope[:, :, None, :], (b, s, heads, rope))
    k_nope = jnp.dot(latent, wku).reshape(b, s, heads, nope)
    v = jnp.dot(latent, wvu).reshape(b, s, heads, vdim)
    inv = 1.0 / (10000.0 ** (jnp.arange(0, rope, 2, dtype=jnp.float32) / rope))
    ang = jnp.arange(s, dtype=jnp.float32)[:, None] * inv[None, :]
    cos, sin = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
    qf = jnp.concatenate([q[..., :nope], _rope(q[..., nope:], cos, sin)], axis=-1)
    kf = jnp.concatenate([k_nope, _rope(k_rope, cos, sin)], axis=-1)
    sc = jnp.einsum("bqhd,bkhd->bhqk", qf, kf) * (nope + rope) ** -0.5
    sc = jnp.where(jnp.tril(jnp.ones((s, s))) != 0, sc, -1e9)
    o = jnp.einsum("bhqk,bkhd->bhqd", jax.nn.softmax(sc, axis=-1), v)
    return jnp.dot(jnp.transpose(o, (0, 2, 1, 3)).reshape(b, s, heads * vdim), wo)


def _task(scales=None):
    w = Init("normal", std=0.1)
    args = (ArgSpec("x", ("B", "S", "E"), "float32", Init("normal")), ArgSpec("wqd", ("E", "QL"), "float32", w),
            ArgSpec("wqu", ("QL", "HQK"), "float32", w), ArgSpec("wkvd", ("E", "KVR"), "float32", w),
            ArgSpec("wku", ("KVL", "HN"), "float32", w), ArgSpec("wvu", ("KVL", "HV"), "float32", w),
            ArgSpec("wo", ("HV", "E"), "float32", w))
    static = tuple(StaticArg(n, v) for n, v in (("heads", 2), ("nope", 16), ("rope", 8), ("vdim", 16), ("lora", 16)))
    dims = {"B": 1, "S": 32, "E": 64, "QL": 32, "KVL": 16, "HQK": 48, "KVR": 24, "HN": 32, "HV": 32}
    return Task("tiny_mla", _mla, args, scales or {"ci": Scale("ci", dims)}, static=static,
                tolerance=Tolerance(2e-3, 2e-3))


def _props(target):
    task = _task()
    authored = OfflineAuthor().propose(task, target)
    props = [p for p in authored.proposals if p.template == "mla"]
    assert props, authored.declined
    assert not {p.template for p in authored.proposals} & {"attention", "flex_attention"}
    return task, props


def _rule15(task, fn, target):
    """What the judge's ablation sees: the changed-or-feeding kernels, and the outside/reference FLOP share."""
    t = get_target(target)
    structs = task.arg_structs("ci")
    checks = [export.DisabledSafetyCheck.custom_call(c) for c in sorted(t.kernel_calls)]
    with t.lowering_context():
        exp = export.export(jax.jit(lambda *a: fn(*a)), platforms=[t.platform], disabled_checks=checks)(*structs)
    n = len(program.kernel_calls(program.custom_calls(exp.mlir_module()), target))
    xs = task.make_inputs("ci", 0, "normal")

    def run(fills):
        return np.asarray(jax.jit(program.ablated(exp, fills).call)(*xs))

    base = run([1.0] * n)
    changed = [not np.array_equal(base, run([None if i == k else 1.0 for i in range(n)]), equal_nan=True)
               for k in range(n)]
    feeds = program.kernel_feeds(exp)
    for _ in range(n):
        changed = [c or any(changed[j] for j in feeds[k]) for k, c in enumerate(changed)]
    outside = program.work(program.ablated(exp, [None] * n, keep_operands=True)).flops
    ref = program.flops(export.export(jax.jit(task.bind(task.reference, "ci")), platforms=["cpu"])(*structs))
    return n, changed, outside / ref


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_tiny_mla_written_program_matches_and_kernels_do_the_work(target):
    task, props = _props(target)
    prop = props[0]  # the online schedule; the resident one shares everything but the core's kernel
    assert "CAUSAL = True" in prop.source and prop.source.count("= _matmul(") == 6 and "from mk" not in prop.source
    ns = {}
    exec(compile(prop.source, "candidate", "exec"), ns)
    fn = task.bind(lambda *a: ns["kernel"](*a), "ci")
    xs = task.make_inputs("ci", 3, "normal")
    with get_target(target).execution():
        got = np.asarray(jax.jit(fn)(*xs))
    want = np.asarray(jax.jit(task.bind(task.reference, "ci"))(*xs))
    np.testing.assert_allclose(got, want, atol=2e-3, rtol=2e-3)
    n, changed, share = _rule15(task, fn, target)
    assert n == 7 and all(changed), changed  # six projections and the core, none dead
    assert share < 0.1, share  # only RoPE, casts and reshapes stay in XLA (the judge rejects > 50 %, flags > 10 %)


def test_plain_attention_stays_the_attention_templates():
    task = load_task("jaxbench:2p_GQA_Attention")
    task = task.with_scales({"ci": task.scale("ci")})
    authored = OfflineAuthor().propose(task, "tpu")
    assert "mla" not in {p.template for p in authored.proposals}
    assert "attention template" in authored.declined["mla"]
    assert "attention" in {p.template for p in authored.proposals}


def test_probe_runs_at_the_smallest_scale(monkeypatch):
    dims = dict(_task().scale("ci").dims)
    big = Scale("big", {**dims, "S": 4096, "E": 8192})  # never run on the CPU: only traced
    task = _task({"big": big, "ci": Scale("ci", dims)})
    ran = []
    make = Task.make_inputs
    monkeypatch.setattr(Task, "make_inputs", lambda self, scale, *a, **k: ran.append(scale) or make(self, scale, *a, **k))
    mla.propose(task, trace_scales(task), "tpu")
    assert ran and set(ran) == {"ci"}
