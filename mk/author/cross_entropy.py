"""Fused LM-head cross-entropy: ``logits = x @ W``, log-softmax over the vocabulary, pick at the labels.

Recognised on the flattened IR (:mod:`mk.author.ir`): exactly one 2-D
``dot_general`` whose operands are two task inputs (casts/transposes allowed,
``W`` as (H, V) or (V, H)); a row log-sum-exp over the vocabulary axis of its
output (``reduce_max``, ``exp``, ``reduce_sum``, ``log``); an integer input of
shape (T,) that only picks a column, either through a one-hot
(``eq`` against an ``iota``) or a ``gather`` (``take_along_axis``); and one
output, a scalar (mean or sum over tokens) or per-token losses. The sign and
the mean/sum factor are then fitted by probing the reference at its smallest
scale against ``lse(logits) - logits[label]`` (and checked on a second draw),
so label smoothing, z-loss, ignore-index masks or extra weights are declined
instead of silently dropped. Labels outside ``[0, V)`` (padding's -1, a label
past the vocabulary) are probed too (:func:`fit_labels`): the written kernel
gives the reference's loss there (0 for a one-hot, NaN or a wrapped label for
``take_along_axis``, a clamped label) and no gradient through such a token, or
the family declines; the kernels never pick a padded column.

The kernels are importable code in :mod:`mk.kernels.cross_entropy` (``ce_fwd_tpu`` /
``ce_fwd_gpu`` for the forward, ``ce_bwd_tpu`` / ``ce_bwd_gpu`` for the
backward, the W layout and x layout static arguments); the written file copies
``mk/kernels/cross_entropy/<target>.py`` in unchanged and this module generates
only ``kernel`` (layout flags, logits dtype, then the fitted reduction and sign
over the per-token losses) and ``kernel_bwd``.

The TPU forward runs a grid (T/block_t, V/block_v) with the vocabulary axis
"arbitrary": each step computes a (block_t, block_v) logits tile from
(block_t, H) x (H, block_v) in VMEM (rounded to the reference's logits dtype,
then f32 math), and updates a running max, running sum of exponentials and the
picked logit per row in f32 VMEM scratch; the logits never reach HBM. It writes
per-token losses; the mean/sum over tokens is plain jnp afterwards. Vocabulary
sizes: ``block_v`` shrinks to a multiple of 128 that divides V; when V is not a
multiple of 128 (the 13p ci scale, V=1000), W is zero-padded to a multiple of
``block_v`` and the padded columns are masked to -1e30 (labels never point
there). T is handled the same way with a quantum of 8.

The GPU forward (Pallas Triton: no scratch memory, power-of-two blocks) runs one
program per token block; a ``lax.fori_loop`` over vocabulary blocks (``pl.ds``
slices of W) carries the running max, sum of exponentials and picked logit, and
an inner loop over hidden chunks accumulates each (block_t, block_v) logits tile
in f32. T, V and H are zero-padded to multiples of their (power-of-two) blocks.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from mk.author.emit import language_stem, Unsupported
from mk.author.ir import Op, Program, Val, from_jaxpr
from mk.author.probe import arg_names, signature
from mk.author.proposal import Proposal
from mk.author.trace import Traced
from mk.task import Task
from mk.targets import kernel_language

log = logging.getLogger(__name__)

#: VMEM the TPU kernel plans for (double-buffered x and W tiles plus f32 temporaries)
VMEM_BUDGET = 24 * 2**20
_TPU_BLOCK_T = (128, 256, 512)
_TPU_BLOCK_V = (256, 512, 1024, 2048)


@dataclass(frozen=True)
class CEPattern:
    x: int  # task input indices
    w: int
    labels: int
    x_tokens_first: bool  # x is (T, H) (else (H, T))
    w_vocab_first: bool  # W is (V, H) (else (H, V))
    logits_dtype: str


def _back(v: Val, prod: dict[int, Op]) -> tuple[Val, bool]:
    """Follow casts and 2-D transposes back to a task input; returns (input, transposed)."""
    flipped = False
    while v.arg is None:
        op = prod.get(id(v))
        if op is None:
            raise Unsupported("a matmul operand is not computed from an input")
        if op.prim == "transpose" and tuple(op.params["permutation"]) == (1, 0):
            flipped = not flipped
        elif op.prim != "convert_element_type":
            raise Unsupported(f"a matmul operand is computed by {op.prim!r} before the product")
        v = op.ins[0]
    return v, flipped


def _descends(prog: Program, root: Val) -> set[int]:
    """Ids of every value computed (transitively) from ``root``."""
    seen = {id(root)}
    for op in prog.ops:
        if any(id(i) in seen for i in op.ins):
            seen.add(id(op.out))
    return seen


def recognise(prog: Program) -> CEPattern:
    dots = [op for op in prog.ops if op.prim == "dot_general"]
    if len(dots) != 1:
        raise Unsupported(f"cross-entropy needs exactly one matrix product (the vocabulary projection), found {len(dots)}")
    dot = dots[0]
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    if lb or rb or len(lc) != 1 or len(dot.out.shape) != 2 or len(dot.ins[0].shape) != 2:
        raise Unsupported("the product is not a plain 2-D matmul")
    if len(prog.args) != 3 or len(prog.outs) != 1:
        raise Unsupported("cross-entropy takes exactly (hidden, weight, labels) and returns one value")
    prod = prog.producers()
    a, a_t = _back(dot.ins[0], prod)
    b, b_t = _back(dot.ins[1], prod)
    if a.arg == b.arg:
        raise Unsupported("both matmul operands come from the same input")
    # the vocabulary axis: the logits axis every reduce_max / logsumexp reduces over
    logits = dot.out
    down = _descends(prog, logits)
    maxes = [op for op in prog.ops if op.prim == "reduce_max" and id(op.ins[0]) in down]
    if len(maxes) != 1 or len(maxes[0].params["axes"]) != 1 or maxes[0].ins[0].shape != logits.shape:
        raise Unsupported("no single row max over the logits (the log-softmax's stabiliser)")
    vaxis = maxes[0].params["axes"][0]
    prims = {op.prim for op in prog.ops if id(op.out) in down}
    if not {"exp", "reduce_sum", "log"} <= prims:
        raise Unsupported("no log-sum-exp over the logits (exp, sum, log)")
    # dot_general output axes: lhs free axis, then rhs free axis
    w_val, w_flip, w_contract = (b, b_t, rc[0]) if vaxis == 1 else (a, a_t, lc[0])
    x_val, x_flip, x_contract = (a, a_t, lc[0]) if vaxis == 1 else (b, b_t, rc[0])
    # contraction axis in the input's own layout
    w_h_axis = (1 - w_contract) if w_flip else w_contract
    x_h_axis = (1 - x_contract) if x_flip else x_contract
    if len(x_val.shape) != 2 or len(w_val.shape) != 2:
        raise Unsupported("hidden and weight must be 2-D inputs")
    T, V = x_val.shape[1 - x_h_axis], w_val.shape[1 - w_h_axis]
    lab = [v for v in prog.args if v.arg not in (x_val.arg, w_val.arg)][0]
    if lab.shape != (T,) or lab.dtype.kind not in "iu":
        raise Unsupported(f"the third input is not integer labels of shape ({T},) (it is {lab.dtype} {lab.shape})")
    _check_label_uses(prog, lab)
    out = prog.outs[0]
    if out.shape not in ((), (T,), (T, 1)):
        raise Unsupported(f"the output {out.shape} is neither a scalar nor per-token losses")
    log.debug("cross-entropy: T=%d V=%d vocab axis %d", T, V, vaxis)
    return CEPattern(x_val.arg, w_val.arg, lab.arg, x_h_axis == 1, w_h_axis == 1, str(logits.dtype))


def _check_label_uses(prog: Program, lab: Val) -> None:
    """The labels may only select a column: a one-hot (eq against an iota) or a gather index."""
    frontier = {id(lab)}
    for op in prog.ops:
        if not any(id(i) in frontier for i in op.ins):
            continue
        if op.prim in ("broadcast_in_dim", "reshape", "convert_element_type", "concatenate"):
            frontier.add(id(op.out))
        elif op.prim == "eq" and any(not (id(i) in frontier) and _is_iota(prog, i) for i in op.ins):
            continue
        elif op.prim == "gather" and id(op.ins[0]) not in frontier:
            continue
        elif op.prim in ("lt", "ge", "add", "select_n", "clamp", "and") and len(frontier) < 12:
            # jnp.take_along_axis normalises negative indices: where(i < 0, i + V, i); bounds clamps
            frontier.add(id(op.out))
        else:
            raise Unsupported(f"the labels are used by {op.prim!r}, not only to pick one logit per token "
                              "(ignore-index masks and label weights are not supported)")


def _is_iota(prog: Program, v: Val) -> bool:
    prod = prog.producers()
    while id(v) in prod:
        op = prod[id(v)]
        if op.prim == "iota":
            return True
        if op.prim not in ("broadcast_in_dim", "reshape", "convert_element_type"):
            return False
        v = op.ins[0]
    return False


def _canon(pat: CEPattern, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = xs[pat.x] if pat.x_tokens_first else xs[pat.x].T
    w = xs[pat.w].T if pat.w_vocab_first else xs[pat.w]
    return x, w, np.asarray(xs[pat.labels]).astype(np.int64)


def _logits(pat: CEPattern, xs: list[np.ndarray]) -> np.ndarray:
    """The logits rounded to the reference's dtype, as f64 (T, V)."""
    import jax.numpy as jnp

    x, w, _ = _canon(pat, xs)
    logits = jnp.dot(jnp.asarray(x), jnp.asarray(w), preferred_element_type=jnp.float32).astype(pat.logits_dtype)
    return np.asarray(logits.astype(jnp.float32), np.float64)


def _nll(pat: CEPattern, xs: list[np.ndarray]) -> np.ndarray:
    """lse(logits) - logits[label] per token."""
    lg = _logits(pat, xs)
    m = lg.max(axis=1)
    lse = m + np.log(np.exp(lg - m[:, None]).sum(axis=1))
    return lse - lg[np.arange(lg.shape[0]), _canon(pat, xs)[2]]


def _probe_inputs(task: Task, scale: str, pat: CEPattern, seed: int, confident: bool) -> list[np.ndarray]:
    """Inputs whose logits spread (std ~3) so the loss is not near log V for every form; ``confident``: each
    label is its row's argmax (a smoothed or regularised loss then differs clearly from plain cross-entropy)."""
    xs = [np.asarray(x) for x in task.make_inputs(scale, seed, "normal")]
    std = float(_logits(pat, xs).std()) or 1.0
    xs[pat.x] = (xs[pat.x].astype(np.float32) * (3.0 / std)).astype(xs[pat.x].dtype)
    if confident:
        xs[pat.labels] = _logits(pat, xs).argmax(axis=1).astype(xs[pat.labels].dtype)
    return xs


def fit(task: Task, traced: list[Traced], pat: CEPattern) -> tuple[str, float]:
    """(reduction, sign): reduction in mean|sum|none, fitted on the reference at its smallest scale."""
    import jax

    t = min(traced, key=lambda t: sum(math.prod(s) for s in t.shapes))
    ref = jax.jit(task.bind(task.reference, t.scale))
    found: tuple[str, float] | None = None
    for seed, confident in ((11, False), (12, True)):
        xs = _probe_inputs(task, t.scale, pat, seed, confident)
        nll = _nll(pat, xs)
        out = np.asarray(ref(*xs), np.float64).reshape(-1)
        T = nll.shape[0]
        if out.size == 1:
            total = float(nll.sum())
            c = float(out[0]) / total if total else 0.0
            options = [("mean", 1.0 / T), ("mean", -1.0 / T), ("sum", 1.0), ("sum", -1.0)]
            got = [(r, math.copysign(1.0, f)) for r, f in options if math.isclose(c, f, rel_tol=2e-2)]
        else:
            # loose enough for XLA eliding the logits' rounding, tight enough to see a smoothing or z-loss term
            atol, rtol = (max(x, f) for x, f in zip(task.tolerance.for_output(0), (0.05, 0.02)))
            got = [("none", s) for s in (1.0, -1.0) if np.allclose(out, s * nll, atol=atol, rtol=rtol)]
        if not got:
            raise Unsupported("the reference's value is not (the mean or sum of) lse(logits) - logits[label]: "
                              "label smoothing, z-loss, masks or weights are not supported by this template")
        if found is not None and got[0] != found:
            raise Unsupported("the reference's loss reduction is not stable across input draws")
        found = got[0]
    return found  # type: ignore[return-value]


#: what a reference does with a label outside [0, V), per side: the token's loss is 0 (a one-hot of an out-of-range
#: label is all zeros), NaN (take_along_axis fills), the label wraps by V (numpy's negative indices) or is clamped
LABEL_RULES = ("zero", "nan", "wrap", "clamp")


@dataclass(frozen=True)
class LabelRange:
    """The reference's behaviour for labels below 0 (``low``) and at or above V (``high``), fitted by probing."""

    low: str
    high: str


def fit_labels(task: Task, traced: list[Traced], pat: CEPattern, reduction: str, sign: float) -> LabelRange:
    """Probe the reference with one token's label set to -1, then to V, and match its output against each rule of
    :data:`LABEL_RULES` (the kernel then reproduces it); a behaviour that is none of them is declined."""
    import jax

    t = min(traced, key=lambda t: sum(math.prod(s) for s in t.shapes))
    ref = jax.jit(task.bind(task.reference, t.scale))
    xs = _probe_inputs(task, t.scale, pat, 13, False)
    nll = _nll(pat, xs)
    lg = _logits(pat, xs)
    V = lg.shape[1]
    m = lg.max(axis=1)
    lse = m + np.log(np.exp(lg - m[:, None]).sum(axis=1))
    labels = np.asarray(xs[pat.labels])
    found = []
    for bad, side in ((-1, "low"), (V, "high")):
        probe = list(xs)
        lab = labels.copy()
        lab[0] = bad
        probe[pat.labels] = lab.astype(labels.dtype)
        out = np.asarray(ref(*probe), np.float64).reshape(-1)
        per = {"zero": 0.0, "nan": math.nan, "wrap": lse[0] - lg[0, bad % V], "clamp": lse[0] - lg[0, min(max(bad, 0), V - 1)]}
        rules = []
        for rule, first in per.items():
            want_tokens = nll.copy()
            want_tokens[0] = first
            want = {"mean": sign * want_tokens.mean(keepdims=True), "sum": sign * want_tokens.sum(keepdims=True)}.get(
                reduction, sign * want_tokens)
            if want.size != out.size:
                continue
            if (np.isnan(want) == np.isnan(out)).all() and np.allclose(out[~np.isnan(out)], want[~np.isnan(want)],
                                                                        atol=5e-2, rtol=2e-2):
                rules.append(rule)
        if not rules:
            raise Unsupported(f"the reference's loss for a label {'below 0' if side == 'low' else 'at V or above'} is "
                              "none of: 0, NaN, the label wrapped by V, the label clamped; the kernel could not match it")
        found.append(rules[0])
    return LabelRange(*found)


def _tpu_space(traced: list[Traced], pat: CEPattern) -> dict[str, list[int]]:
    H = max(t.shapes[pat.x][1 if pat.x_tokens_first else 0] for t in traced)
    T = max(t.shapes[pat.x][0 if pat.x_tokens_first else 1] for t in traced)
    isz = 2  # bf16 operands (f32 ones halve the fitting blocks; the kernel still runs)

    def need(bt: int, bv: int) -> int:
        return 2 * bt * H * isz + 2 * H * bv * isz + 4 * bt * bv * 4

    bts = list(_TPU_BLOCK_T)
    while bts:
        bvs = [bv for bv in _TPU_BLOCK_V if need(bts[-1], bv) <= VMEM_BUDGET]
        if bvs:
            break
        bts.pop()
    if not bts:
        raise Unsupported(f"hidden size {H} is too large: even a (128, H) x (H, 256) tile pair overflows "
                          f"the {VMEM_BUDGET >> 20} MiB VMEM budget")
    space = {"block_t": bts, "block_v": bvs}
    if T < space["block_t"][-1]:
        space["block_t"] = [b for b in space["block_t"] if b <= max(T, space["block_t"][0])]
    return space


def propose(task: Task, traced: list[Traced], target: str) -> Proposal:
    if not kernel_language(target):
        raise Unsupported(f"the cross-entropy template writes Pallas TPU and GPU (Triton) kernels, not {target!r}")
    pat = recognise(from_jaxpr(traced[0].jaxpr))
    for t in traced[1:]:
        if recognise(from_jaxpr(t.jaxpr)) != pat:
            raise Unsupported("the cross-entropy layout changes between scales")
    try:
        reduction, sign = fit(task, traced, pat)
        labels = fit_labels(task, traced, pat, reduction, sign)
    except Unsupported:
        raise
    except Exception as exc:  # the reference failed on probe inputs: decline, never crash the author
        raise Unsupported(f"probing the reference failed ({type(exc).__name__}: {exc})") from exc
    kind = f"{reduction} of {'+' if sign > 0 else '-'}(lse - picked logit), W {'(V,H)' if pat.w_vocab_first else '(H,V)'}"
    if kernel_language(target) == "triton":
        space = _gpu_space(traced, pat)
        return Proposal(
            name="cross-entropy-gpu",
            source=with_backward(_render(task, pat, reduction, sign, space, target, labels), task, pat, reduction, sign,
                                 target, labels),
            rationale=f"fused LM-head cross-entropy ({kind}), Pallas Triton: one program per token block loops over "
            "vocabulary blocks (and hidden chunks) with an online log-sum-exp in registers; logits never reach HBM; "
            "per-token losses reduced in jnp; " + _BACKWARD_PLAN,
            template="cross_entropy",
        )
    space = _tpu_space(traced, pat)
    return Proposal(
        name="cross-entropy-tpu",
        source=with_backward(_render(task, pat, reduction, sign, space, target, labels), task, pat, reduction, sign,
                                 target, labels),
        rationale=f"fused LM-head cross-entropy ({kind}): online log-sum-exp over vocabulary blocks, logits tiles "
        "computed in VMEM and never written to HBM; per-token losses reduced in jnp; " + _BACKWARD_PLAN,
        template="cross_entropy",
    )


def _final(reduction: str, sign: float) -> str:
    if reduction == "mean":
        return f"{sign!r} * jnp.mean(per_token)"
    if reduction == "sum":
        return f"{sign!r} * jnp.sum(per_token)"
    return f"{sign!r} * per_token"


def _out_shape(task: Task, pat: CEPattern, names: list[str]) -> str:
    import jax

    scale = next(iter(task.scales))
    out = jax.eval_shape(task.bind(task.reference, scale), *task.arg_structs(scale))
    if out.shape == ():
        return "()"
    return f"{names[pat.labels]}.shape" if len(out.shape) == 1 else f"({names[pat.labels]}.shape[0], 1)"


def _out_dtype(task: Task) -> str:
    import jax

    scale = next(iter(task.scales))
    out = jax.eval_shape(task.bind(task.reference, scale), *task.arg_structs(scale))
    return f'jnp.dtype("{np.dtype(out.dtype).name}")'


#: Triton block options: powers of two, >= 16 (Triton's smallest dot)
_GPU_BLOCK_T = (16, 32, 64)
_GPU_BLOCK_V = (64, 128, 256)
_GPU_BLOCK_H = (32, 64, 128)


def _gpu_space(traced: list[Traced], pat: CEPattern) -> dict[str, list[int]]:
    T = max(t.shapes[pat.x][0 if pat.x_tokens_first else 1] for t in traced)
    H = max(t.shapes[pat.x][1 if pat.x_tokens_first else 0] for t in traced)
    bts = [b for b in _GPU_BLOCK_T if b <= max(T, 16)] or [16]
    bhs = [b for b in _GPU_BLOCK_H if b <= max(H, 32)] or [32]
    return {"block_t": bts, "block_v": list(_GPU_BLOCK_V), "block_h": bhs, "num_warps": [4, 8]}


_TPU_TEXT = ("Grid (T/block_t, V/block_v), vocabulary axis \"arbitrary\": each step computes a (block_t, block_v) "
             "logits tile in VMEM, rounds it to {dtype} like the reference, and updates a running max, running sum of "
             "exponentials and the picked logit per token (f32 scratch). Only per-token losses reach HBM; the "
             "{reduction} over tokens is jnp. V not a multiple of 128: W is zero-padded to a multiple of block_v and "
             "padded columns are masked. The kernels are mk/kernels/cross_entropy/tpu.py, copied in below.")
_GPU_TEXT = ("One program per token block. A lax.fori_loop over vocabulary blocks (pl.ds slices of W) carries the "
             "running max, running sum of exponentials and picked logit per token in registers (Triton has no "
             "scratch memory); an inner loop over hidden chunks accumulates each (block_t, block_v) logits tile in "
             "f32, rounded to {dtype} like the reference. Only per-token losses reach HBM; the {reduction} over "
             "tokens is jnp. Blocks are powers of two; T, V and H are zero-padded to multiples of them (padded "
             "vocabulary columns masked, padded tokens sliced off). The kernels are "
             "mk/kernels/cross_entropy/gpu.py, copied in below.")


def _label_lines(pat: CEPattern, names: list[str], labels: LabelRange) -> list[str]:
    """``kernel``'s and ``kernel_bwd``'s first lines: the labels as the reference reads them (wrapped or clamped
    where it does so), ``valid`` for those inside [0, V), and ``picked``: valid labels, -1 elsewhere (no column)."""
    w = names[pat.w]
    lines = [f"    vocab = {w}.shape[{0 if pat.w_vocab_first else 1}]", f"    labels = {names[pat.labels]}"]
    if labels.low == "wrap":
        lines.append("    labels = jnp.where(labels < 0, labels + vocab, labels)  # as the reference: negative labels wrap")
    elif labels.low == "clamp":
        lines.append("    labels = jnp.maximum(labels, 0)  # as the reference: clamped")
    if labels.high == "wrap":
        lines.append("    labels = jnp.where(labels >= vocab, labels - vocab, labels)  # as the reference: labels wrap")
    elif labels.high == "clamp":
        lines.append("    labels = jnp.minimum(labels, vocab - 1)  # as the reference: clamped")
    lines += ["    valid = (labels >= 0) & (labels < vocab)",
              "    picked = jnp.where(valid, labels, -1).astype(labels.dtype)  # -1 picks no column"]
    return lines


def _fill(rule: str) -> str:
    return "0.0" if rule == "zero" else "jnp.nan"


def _render(task: Task, pat: CEPattern, reduction: str, sign: float, space: dict[str, list[int]],
            target: str = "tpu", labels: LabelRange = LabelRange("zero", "zero")) -> str:
    """The written file's forward: its head, mk/kernels/cross_entropy/<target>.py copied in, and ``kernel`` (the
    layout flags, the logits dtype, then the reduction and sign over the per-token losses)."""
    from mk.author.emit import family_section, file_head
    from mk.kernels.cross_entropy import gpu as ce_gpu
    from mk.kernels.cross_entropy import tpu as ce_tpu

    gpu = kernel_language(target) == "triton"
    names = arg_names(task)
    if gpu:
        cfg = f"block_t={space['block_t'][-1]}, block_v=128, block_h={space['block_h'][-1]}, num_warps=4"
        blocks = "block_t=block_t, block_v=block_v, block_h=block_h, num_warps=num_warps"
    else:
        bt = 256 if 256 in space["block_t"] else space["block_t"][-1]
        bv = 512 if 512 in space["block_v"] else space["block_v"][-1]
        cfg, blocks = f"block_t={bt}, block_v={bv}", "block_t=block_t, block_v=block_v"
    text = (_GPU_TEXT if gpu else _TPU_TEXT).format(dtype=pat.logits_dtype, reduction=reduction)
    title = f"mk offline author: fused LM-head cross-entropy for {task.name} (target {'gpu, Pallas Triton' if gpu else 'tpu'})."
    lines = [
        *file_head(title, text, gpu=gpu, space=space),
        "#: W is stored (V, H) (else (H, V)); x is stored (T, H) (else (H, T))",
        f"W_VOCAB_FIRST = {pat.w_vocab_first}",
        f"X_TOKENS_FIRST = {pat.x_tokens_first}",
        f'LOGITS_DTYPE = jnp.dtype("{pat.logits_dtype}")',
        "",
        "",
        *family_section(ce_gpu if gpu else ce_tpu),
        "",
        "",
        f"def kernel({signature(task, cfg)}):",
        *_label_lines(pat, names, labels),
        f"    per_token = {'ce_fwd_gpu' if gpu else 'ce_fwd_tpu'}({names[pat.x]}, {names[pat.w]}, "
        "jnp.where(valid, labels, 0).astype(labels.dtype),",
        "                           w_vocab_first=W_VOCAB_FIRST, x_tokens_first=X_TOKENS_FIRST,",
        f"                           logits_dtype=LOGITS_DTYPE, {blocks})",
        f"    # a label outside [0, V) after that: the reference's loss there ({labels.low} below 0, {labels.high} at V "
        "or above)",
        f"    per_token = jnp.where(labels < 0, {_fill(labels.low)}, jnp.where(labels >= vocab, {_fill(labels.high)}, "
        "per_token))",
        f"    out = {_final(reduction, sign)}",
        f"    return out.reshape({_out_shape(task, pat, names)}).astype({_out_dtype(task)})",
        "",
    ]
    return "\n".join(lines)


# --- the backward --------------------------------------------------------------------------------------------------
_BACKWARD_PLAN = ("backward: mk/kernels/cross_entropy (lse recomputed online over vocabulary blocks, dlogits = "
                  "c * (softmax - onehot) per tile in a kernel, dx and dW by matmuls)")


def with_backward(source: str, task: Task, pat: CEPattern, reduction: str, sign: float, target: str,
                  labels: LabelRange = LabelRange("zero", "zero")) -> str:
    """The written file with its backward ``kernel_bwd`` (the contract in docs/components.md; the kernels of
    mk/kernels/cross_entropy/<target>.py are in the file already, copied in with the forward): the per-token
    cotangent ``c`` from the loss's reduction and sign, then ``(dx, dW)`` in the inputs' own layouts and None for
    the labels."""
    gpu = kernel_language(target) == "triton"
    names = arg_names(task)
    x, w, lab = names[pat.x], names[pat.w], names[pat.labels]
    x_expr = x if pat.x_tokens_first else f"{x}.T"
    w_expr = f"{w}.T" if pat.w_vocab_first else w
    if reduction == "mean":
        c = f"jnp.broadcast_to({sign!r} / tokens * cotangent.astype(jnp.float32).reshape(()), (tokens,))"
    elif reduction == "sum":
        c = f"jnp.broadcast_to({sign!r} * cotangent.astype(jnp.float32).reshape(()), (tokens,))"
    else:
        c = f"{sign!r} * cotangent.astype(jnp.float32).reshape(tokens)"
    prec = "lax.Precision.HIGHEST" if np.dtype(pat.logits_dtype) == np.float32 else "None"
    grads = ["None"] * len(names)
    grads[pat.x] = "dx" if pat.x_tokens_first else "dx.T"
    grads[pat.w] = "dw.T" if pat.w_vocab_first else "dw"
    fn = "ce_bwd_gpu" if gpu else "ce_bwd_tpu"
    if f"# --- mk/kernels/cross_entropy/{language_stem(target)}.py" not in source:  # the forward copied the kernels in already
        raise Unsupported("internal: the cross-entropy file lacks its copy of mk/kernels/cross_entropy")
    lines = [
        "",
        "",
        f"def kernel_bwd(cotangent, {signature(task, '')}):",
        '    """The backward of kernel: the per-token cotangent from the loss\'s reduction, then the recomputed '
        'log-sum-exp,',
        '    dlogits tiles and the two products (mk/kernels/cross_entropy); one cotangent per input, None for the '
        'labels."""',
        f"    tokens = {lab}.shape[0]",
        *_label_lines(pat, names, labels),
        "    # a token whose label is outside [0, V) has a constant loss (0 or NaN): no gradient through it",
        f"    c = jnp.where(valid, {c}, 0.0)",
        f"    dx, dw = {fn}({x_expr}, {w_expr}, picked, c, logits_dtype=jnp.dtype({pat.logits_dtype!r}), precision={prec})",
        f"    return ({', '.join(grads)},)",
        "",
    ]
    if not gpu and "pallas import tpu as pltpu" not in source:
        raise Unsupported("internal: the TPU cross-entropy file lacks its pltpu import")
    return source.rstrip("\n") + "\n" + "\n".join(lines)
