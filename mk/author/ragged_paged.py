"""Ragged paged-attention recogniser, bound to :mod:`mk.kernels.ragged_paged_attention`.

Applies when the reference reads a ragged batch over a paged KV cache with
combined K/V heads: one rank-3 float query input (T, Hq, D), one rank-4 float
page input (P, page, 2 * Hkv, D), and four int inputs: lengths (S,), a page
table (S, pages), query offsets (S + 1,) (``cu_q_lens``) and the number of
active sequences (1,); nothing else, and one output (T, Hq, D). The score scale
is the scalar factor on the first product's output (an expression of the sizes
and statics, :mod:`mk.author.probe`). The semantics (K at even and V at odd
combined heads, token rows owned through cu_q_lens by the first num_seqs
sequences, the mask ``t < kv_len`` and ``t <= kv_len - q_len + r``, grouped
heads, rows no active sequence owns 0) are then checked by running the reference
on float32 copies of random cases (scattered pages, random lengths, one with
fewer active sequences) against the family reference; else the recogniser
declines.
"""

from __future__ import annotations

import numpy as np

from mk.author.emit import family_section, file_head, language_stem, Unsupported
from mk.author.ir import from_jaxpr
from mk.author.paged import score_scale, score_scale_expr
from mk.author.probe import arg_names, probes_for, signature, static_names
from mk.author.proposal import Proposal
from mk.author.trace import Traced, smallest_scale
from mk.kernels.ragged_paged_attention import Shapes, default, gpu as gpu_kernel, space, tpu as tpu_kernel
from mk.task import Task, np_dtype
from mk.targets import kernel_language, kernel_spec

_DEFINED = {"ragged_paged_attention_tpu", "ragged_paged_attention_gpu", "_rpa_tpu_kernel", "_rpa_gpu_kernel",
            "seq_ranges", "_pow2", "_MASKED", "scale", "out"}
_ROLES = ("q", "kv", "lengths", "table", "offsets", "num_seqs")


def _roles(task: Task, shapes: list[tuple[int, ...]]) -> dict[str, int]:
    floats = [i for i, a in enumerate(task.args) if np.issubdtype(np_dtype(a.dtype), np.floating)
              or np_dtype(a.dtype).name == "bfloat16"]
    ints = [i for i, a in enumerate(task.args) if np.issubdtype(np_dtype(a.dtype), np.integer)]
    if len(floats) + len(ints) != len(task.args):
        raise Unsupported("an input is neither float nor int")
    queries = [i for i in floats if len(shapes[i]) == 3]
    pages = [i for i in floats if len(shapes[i]) == 4]
    if len(queries) != 1 or len(pages) != 1 or len(floats) != 2:
        raise Unsupported("ragged paged attention reads one rank-3 query input and one rank-4 combined K/V page input")
    (_, hq, d), (_, _, combined, pd) = shapes[queries[0]], shapes[pages[0]]
    if pd != d or combined % 2 or hq % (combined // 2):
        raise Unsupported(f"pages {shapes[pages[0]]} do not match queries {shapes[queries[0]]} (P, page, 2*Hkv, D)")
    tables = [i for i in ints if len(shapes[i]) == 2]
    if len(tables) != 1 or len(ints) != 4:
        raise Unsupported("ragged paged attention reads one int page table (S, pages) and three more int inputs")
    s = shapes[tables[0]][0]
    if s < 2:
        raise Unsupported("one sequence slot: its lengths and the active count cannot be told apart")
    lengths = [i for i in ints if shapes[i] == (s,)]
    offsets = [i for i in ints if shapes[i] == (s + 1,)]
    count = [i for i in ints if shapes[i] == (1,)]
    if len(lengths) != 1 or len(offsets) != 1 or len(count) != 1:
        raise Unsupported("ragged paged attention reads int lengths (S,), query offsets (S + 1,) and num_seqs (1,)")
    return {"q": queries[0], "kv": pages[0], "lengths": lengths[0], "table": tables[0], "offsets": offsets[0],
            "num_seqs": count[0]}


def _verify(task: Task, scale_name: str, roles: dict[str, int], scale: float) -> None:
    """The reference is ragged paged attention with ``scale`` on float32 copies of random cases."""
    import jax
    import jax.numpy as jnp

    from mk.kernels.ragged_paged_attention import reference

    ref_fn = jax.jit(task.bind(task.reference, scale_name))
    for seed, fewer in ((7, False), (8, True)):
        xs = [np.asarray(x) for x in task.make_inputs(scale_name, seed, "normal")]
        xs = [x.astype(np.float32) if not np.issubdtype(x.dtype, np.integer) else x for x in xs]
        if fewer:  # one active sequence fewer: its rows must be 0
            n = int(np.asarray(xs[roles["num_seqs"]]).reshape(-1)[0])
            if n < 2:
                continue
            xs[roles["num_seqs"]] = np.asarray(xs[roles["num_seqs"]]).copy()
            xs[roles["num_seqs"]].reshape(-1)[0] = n - 1
        try:
            got = np.asarray(ref_fn(*xs).astype(np.float32), np.float64)
        except Exception as e:  # noqa: BLE001 - a reference that rejects float32 copies cannot be probed
            raise Unsupported(f"could not run the reference on float32 inputs ({type(e).__name__}: {e})") from e
        args = [jnp.asarray(xs[roles[r]]) for r in _ROLES]
        want_shape = xs[roles["q"]].shape
        if got.shape != want_shape:
            raise Unsupported(f"the reference's output {got.shape} is not the ragged attention output {want_shape}")
        errs = []
        for p_dtype in (jnp.float32, jnp.bfloat16):  # the reference may round the probabilities to bf16
            want = np.asarray(jax.jit(lambda *a: reference(*a, scale=scale, p_dtype=p_dtype))(*args), np.float64)
            err = np.abs(want - got) - (8e-3 * np.abs(want) + 1e-4 * float(np.abs(want).max()) + 1e-6)
            errs.append(float(np.abs(want - got).max()))
            if np.all(err <= 0):
                break
        else:
            raise Unsupported(f"the reference is not ragged paged attention with scale {scale:g}: on a probe input "
                              f"it differs by {min(errs):.3g}")


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    if not kernel_language(target):
        raise Unsupported(f"the ragged paged-attention recogniser writes Pallas TPU and GPU kernels, not {target!r}")
    t0 = traced[0]
    roles = _roles(task, t0.shapes)
    prog = from_jaxpr(t0.jaxpr)
    if len(prog.outs) != 1:
        raise Unsupported("ragged paged attention writes one output")
    if sum(op.prim == "dot_general" for op in prog.ops) < 2:
        raise Unsupported("ragged paged attention has products for scores and values")
    scale = score_scale(prog)
    probe_scale = smallest_scale(traced)
    _verify(task, probe_scale, roles, scale)
    dot = next(op for op in prog.ops if op.prim == "dot_general")
    probes = probes_for(task, traced)
    scale_expr = score_scale_expr(probes, scale, dot.out.dtype)
    names = arg_names(task)
    if set(names) & _DEFINED:
        raise Unsupported(f"an input is named like a function of the kernel module: {sorted(set(names) & _DEFINED)}")
    (t, hq, d), (_, page, combined, _), (_, pages) = (t0.shapes[roles[r]] for r in ("q", "kv", "table"))
    shapes = Shapes(t, hq, combined // 2, d, page, pages, np_dtype(task.args[roles["kv"]].dtype).itemsize)
    out_dtype = np.dtype(prog.outs[0].dtype).name
    return Proposal(
        name=f"ragged-paged-attention-{target}",
        source=_render(task, names, roles, probes.used(scale_expr), scale_expr, out_dtype, target, shapes),
        rationale=f"ragged paged attention ({t} token rows, {hq} query / {combined // 2} kv heads, pages of {page}, "
        f"scale {scale_expr}): "
        + ("one program per (token block, kv head); the sequences overlapping the block, offsets, lengths and page "
           "table in scalar prefetch; each needed page's K and V copied by double-buffered manual DMAs, only up to "
           "the length and causal limit; online softmax in VMEM scratch" if kernel_language(target) == "mosaic"
           else "one Triton program per (token block, kv head) loops over the sequences overlapping its tokens and "
           "their pages up to the length and causal limit, with an online softmax in registers"),
        template="ragged_paged",
    )


def _render(task: Task, names: list[str], roles: dict[str, int], used: list, scale_expr: str, out_dtype: str,
            target: str, shapes: Shapes) -> str:
    gpu = kernel_language(target) == "triton"
    config = default(kernel_spec(target), shapes).kwargs(target)
    cfg_sig = ", ".join(f"{k}={v!r}" for k, v in config.items())
    cfg_call = ", ".join(f"{k}={k}" for k in config)
    q, kv, lengths, table, offsets, count = (names[roles[r]] for r in _ROLES)
    unused = [s for s in static_names(task) if s not in {v.name for v in used} and s not in scale_expr]
    text = (f"Row j of {q} belongs to the sequence i < {count}[0] with {offsets}[i] <= j < {offsets}[i + 1]; it "
            f"attends, with scale {scale_expr}, to the kv slots t < {lengths}[i] with t <= {lengths}[i] - q_len + r "
            f"(r = j - {offsets}[i]) of pages {table}[i] of {kv} (K at even, V at odd combined heads; query head h "
            f"reads kv head h // group); rows no active sequence owns are 0. The kernel is "
            f"mk/kernels/ragged_paged_attention/{language_stem(target)}.py, copied below unchanged; sizes are read from the "
            "arguments at trace time.")
    cast = f".astype(jnp.{out_dtype})" if out_dtype != np.dtype(np_dtype(task.args[roles['q']].dtype)).name else ""
    lines = [
        *file_head(f"mk offline author: ragged paged attention for {task.name} (target {target}).", text, gpu=gpu,
                   space=space(target, shapes)),
        "",
        *family_section(gpu_kernel if gpu else tpu_kernel),
        "",
        "",
        f"def kernel({signature(task, cfg_sig)}):",
        *([f"    del {', '.join(unused)}  # the kernel reads every size from the arguments"] if unused else []),
        *[f"    {v.name} = {v.source}" for v in used if v.name != v.source],
        f"    scale = {scale_expr}",
        f"    out = ragged_paged_attention_{'gpu' if gpu else 'tpu'}({q}, {kv}, {lengths}, {table}, {offsets}, "
        f"{count}, scale=scale, {cfg_call})",
        f"    return out{cast}",
        "",
    ]
    return "\n".join(lines)
