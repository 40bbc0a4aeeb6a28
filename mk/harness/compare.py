"""Judge-side comparison of a candidate's outputs with the reference's.

Per output: shape and dtype must match; ``|cand - ref| <= atol + rtol*|ref|``
with the task's per-output tolerance; NaN/inf where the reference is finite
fails; and an output that passes the tolerance while being uncorrelated with
a varying reference (constants, zeros, noise: rule 4) fails too. Inputs are
compared bit for bit with the judge's pristine copies (rule 6).

A tolerance must be able to reject: where the task's tolerance would accept the
reference scaled by :data:`MUTATION` on a case (outputs far smaller than its
``atol``: a paged-attention output near 1e-3 under ``atol=1e-2`` accepts zeros,
and a kernel that drops the softmax scale), that output is judged on that case at
a tolerance relative to its own scale (:func:`rejecting_tolerance`), which every
comparison here uses and the verdict states in a flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from mk.task import Tolerance

#: rule 4 thresholds: Pearson correlation and relative L2 error against the reference (over every element)
MIN_CORRELATION = 0.9
MAX_RELATIVE_L2 = 0.5
#: elements compared per float64 chunk (32 MB per array)
_CHUNK = 1 << 22
#: the standard mutation a tolerance must reject on every case: the reference scaled by this factor (a dropped or
#: wrong constant factor, a missing softmax scale and zeros are all at least this far off)
MUTATION = 0.9
#: a tolerance that cannot reject the mutation is tightened to this fraction of the output's largest magnitude on
#: the case (atol), and rtol to at most the same fraction: 0.9x then misses by 0.1 - 2 * 0.04 of that magnitude
RELATIVE_TOLERANCE = 0.04


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float | None
    max_rel: float | None
    reason: str = ""
    #: what the comparison changed to be able to reject (a tightened tolerance), for the verdict's flags
    notes: tuple[str, ...] = ()


def rejecting_tolerance(ref: np.ndarray, atol: float, rtol: float) -> tuple[float, float, str]:
    """``(atol, rtol, note)`` for one output on one case: the task's own where it rejects the reference scaled by
    :data:`MUTATION` (some element's change ``(1 - MUTATION)|r|`` exceeds ``atol + rtol|r|``), else a tolerance
    relative to the output's largest finite magnitude on this case (:data:`RELATIVE_TOLERANCE`), with a note saying
    so. Non-float outputs and all-zero outputs keep the task's tolerance."""
    if np.dtype(ref.dtype).kind not in "fcV" or ref.size == 0:
        return atol, rtol, ""
    flat = _flat(ref)
    top = 0.0
    for lo in range(0, flat.size, _CHUNK):
        r = np.abs(_as_float(flat[lo:lo + _CHUNK]))
        r = r[np.isfinite(r)]
        if r.size:
            top = max(top, float(r.max()))
    if top == 0.0 or top * ((1.0 - MUTATION) - rtol) > atol:
        return atol, rtol, ""
    tight_atol, tight_rtol = min(atol, RELATIVE_TOLERANCE * top), min(rtol, RELATIVE_TOLERANCE)
    return tight_atol, tight_rtol, (f"the task's tolerance (atol={atol:g}, rtol={rtol:g}) cannot reject the reference "
                                    f"scaled by {MUTATION:g} on a case whose outputs are this small, so such a case is "
                                    f"judged at atol={RELATIVE_TOLERANCE:g} x the output's largest magnitude there, "
                                    f"rtol={tight_rtol:g}")


def _tolerance(tolerance: Tolerance, k: int, ref: np.ndarray, notes: list[str], outputs: int) -> tuple[float, float]:
    """Output ``k``'s tolerance on this case (:func:`rejecting_tolerance`), its note added to ``notes``."""
    atol, rtol, note = rejecting_tolerance(ref, *tolerance.for_output(k))
    if note:
        notes.append((f"output {k}: " if outputs > 1 else "") + note)
    return atol, rtol


def compare_outputs(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], tolerance: Tolerance) -> Comparison:
    """Compare every output leaf; the first failure gives the reason, errors are maxima over all outputs."""
    if len(candidate) != len(reference):
        return Comparison(False, None, None, f"returned {len(candidate)} output array(s), the reference returns {len(reference)}")
    max_abs = max_rel = 0.0
    notes: list[str] = []
    for k, (r, c) in enumerate(zip(reference, candidate)):
        atol, rtol = _tolerance(tolerance, k, r, notes, len(reference))
        got = compare_one(r, c, atol, rtol)
        max_abs = max(max_abs, got.max_abs or 0.0)
        max_rel = max(max_rel, got.max_rel or 0.0)
        if not got.ok:
            where = f"output {k}: " if len(reference) > 1 else ""
            return Comparison(False, got.max_abs, got.max_rel, where + got.reason, tuple(notes))
    return Comparison(True, max_abs, max_rel, notes=tuple(notes))


def compare_one(ref: np.ndarray, cand: np.ndarray, atol: float, rtol: float) -> Comparison:
    """Compare one output in chunks (float64 copies of at most ``_CHUNK`` elements at a time, so memory stays
    near the arrays' own size however large they are)."""
    if tuple(cand.shape) != tuple(ref.shape):
        return Comparison(False, None, None, f"shape {tuple(cand.shape)} differs from the reference's {tuple(ref.shape)}")
    if cand.dtype != ref.dtype:
        return Comparison(False, None, None, f"dtype {cand.dtype.name} differs from the reference's {ref.dtype.name}")
    rflat, cflat = _flat(ref), _flat(cand)
    n = rflat.size
    max_abs = max_rel = 0.0
    over = compared = 0
    worst: tuple[float, float, float] | None = None  # (excess, got, expected)
    stats = np.zeros(6)  # n, sum r, sum c, sum r*r, sum c*c, sum r*c over every finite element (exact rule 4)
    tiny = atol if atol > 0 else np.finfo(np.float64).tiny
    for lo in range(0, n, _CHUNK):
        r, c = _as_float(rflat[lo:lo + _CHUNK]), _as_float(cflat[lo:lo + _CHUNK])
        finite = np.isfinite(r)
        bad = finite & ~np.isfinite(c)
        if bad.any():
            total = int(bad.sum()) + sum(int((np.isfinite(_as_float(rflat[k:k + _CHUNK])) & ~np.isfinite(_as_float(cflat[k:k + _CHUNK]))).sum())
                                         for k in range(lo + _CHUNK, n, _CHUNK))
            return Comparison(False, None, None, f"{total} NaN/inf value(s) where the reference is finite")
        nf = ~finite
        if nf.any():
            rn, cn = r[nf], c[nf]
            if not (np.isnan(cn) == np.isnan(rn)).all() or not (cn[~np.isnan(rn)] == rn[~np.isnan(rn)]).all():
                return Comparison(False, None, None, "non-finite values differ from the reference's")
        rf, cf = r[finite], c[finite]
        diff = np.abs(cf - rf)
        compared += diff.size
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(rf), tiny)).max()))
            excess = diff - (atol + rtol * np.abs(rf))
            hit = excess > 0
            if hit.any():
                over += int(hit.sum())
                i = int(np.argmax(excess))
                if worst is None or excess[i] > worst[0]:
                    worst = (float(excess[i]), float(cf[i]), float(rf[i]))
        stats += _stats(rf, cf)
    if compared == 0:
        return Comparison(True, 0.0, 0.0)
    if worst is not None:
        return Comparison(
            False, max_abs, max_rel,
            f"{over} of {compared} values outside atol={atol:g} rtol={rtol:g} "
            f"(max abs error {max_abs:.3g}, e.g. got {worst[1]:.6g}, expected {worst[2]:.6g})",
        )
    why = _uncorrelated_stats(stats, ref.dtype)
    if why:
        return Comparison(False, max_abs, max_rel, f"output uncorrelated with the reference ({why})")
    return Comparison(True, max_abs, max_rel)


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1)


def low_precision(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name in ("bfloat16", "float16") or (np.dtype(dtype).kind == "V" and np.dtype(dtype).itemsize <= 2)


def half_ulp(dtype: np.dtype, magnitude: Any) -> Any:
    """Half the spacing of ``dtype``'s values at each ``magnitude`` (an array, or a number): what rounding one float32
    result to the output's dtype may move it. Two honest kernels whose float32 sums differ in their last bits round
    to neighbouring values where the sum lies near a midpoint (a GPU kernel's blocked accumulation against XLA's: one
    bf16 step, 256 at 60,000, past the reference's own 231 error by 3 units). Taken per value, never at the output's
    largest: one exactly representable huge value (a bf16 ``finfo.min`` fill) would otherwise excuse any error
    elsewhere (stop 39's red team)."""
    kind = np.dtype(dtype)
    mant = int(np.finfo(kind).nmant) if kind.kind == "f" else (7 if "bfloat16" in kind.name else 10)
    low = int(np.finfo(kind).minexp) if kind.kind == "f" else (-126 if "bfloat16" in kind.name else -14)
    mag = np.abs(np.asarray(magnitude, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        exp = np.where(mag > 0, np.floor(np.log2(np.where(mag > 0, mag, 1.0))), low)
    exp = np.maximum(np.where(np.isfinite(exp), exp, low), low)  # subnormals: the smallest normal's spacing
    out = np.where(np.isfinite(mag), np.exp2(exp - mant - 1), 0.0)
    return float(out) if np.ndim(out) == 0 else out


def compare_fair(reference: Sequence[np.ndarray], reference_f32: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
                 tolerance: Tolerance) -> Comparison:
    """The rule for low-precision references: an output the tolerance refuses still passes when its largest error
    against the reference computed in float32 is no worse than the low-precision reference's own (within the task's
    tolerance and one rounding: ``own * (1 + rtol) + atol`` plus half a step of the output's dtype at its largest
    value, :func:`half_ulp`), it has no NaN/inf the reference lacks and it correlates with it. A candidate more accurate than a bf16 reference is not
    failed for disagreeing with the reference's rounding."""
    first = compare_outputs(reference, candidate, tolerance)
    if first.ok or len(candidate) != len(reference) or len(reference_f32) != len(reference):
        return first
    max_abs = max_rel = 0.0
    notes: list[str] = []
    for k, (r, r32, c) in enumerate(zip(reference, reference_f32, candidate)):
        atol, rtol = _tolerance(tolerance, k, r, notes, len(reference))
        got = compare_one(r, c, atol, rtol)
        if got.ok:
            max_abs, max_rel = max(max_abs, got.max_abs or 0.0), max(max_rel, got.max_rel or 0.0)
            continue
        if not low_precision(r.dtype) or got.max_abs is None or tuple(r32.shape) != tuple(r.shape):
            return first
        r64, c64, t64 = _as_float(_flat(r)), _as_float(_flat(c)), np.asarray(r32, np.float64).reshape(-1)
        finite = np.isfinite(t64)
        if not np.isfinite(c64[finite]).all():
            return first
        own = float(np.max(np.abs(r64[finite] - t64[finite]), initial=0.0))
        err = np.abs(c64[finite] - t64[finite])
        mine = float(np.max(err, initial=0.0))
        # one rounding more than the reference: half a step of the dtype at each value's own magnitude
        beyond = float(np.max(err - half_ulp(r.dtype, np.abs(t64[finite])), initial=0.0))
        if beyond > own * (1.0 + rtol) + atol or _uncorrelated_stats(_stats(t64[finite], c64[finite]), r.dtype):
            return Comparison(False, got.max_abs, got.max_rel, f"{first.reason}; against the float32 reference its error "
                              f"{mine:.3g} exceeds the {r.dtype.name} reference's own {own:.3g} (after half a "
                              f"{r.dtype.name} step at each value: {beyond:.3g})", first.notes)
        max_abs, max_rel = max(max_abs, got.max_abs), max(max_rel, got.max_rel or 0.0)
    return Comparison(True, max_abs, max_rel, f"passed by the low-precision rule: error against the float32 reference no "
                      f"worse than the {reference[0].dtype.name} reference's own", tuple(notes))


#: the float32 rule's factors: a candidate's worst error against the float64 reference may be this many times the
#: float32 reference's own worst error, and its RMS error this many times the reference's own RMS error. Measured
#: (tests/test_compare_fair.py): an honest reordered summation (K-tiled, or one product at a time up to K = 2048) on
#: activation outliers stays below 3.6x (worst) and 2.1x (RMS); bf16 operands, a dropped K step or a relative bias
#: of 1e-5 are above 10x (worst) and 24x (RMS)
F32_MAX_FACTOR = 8.0
F32_RMS_FACTOR = 4.0


def compare_fair_f64(reference: Sequence[np.ndarray], reference_f64: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
                     tolerance: Tolerance) -> Comparison:
    """The rule for float32 outputs whose tolerance misses come from summation order (a tiled matmul on activation
    outliers: large terms that cancel). Against the reference recomputed in float64, a float32 output the tolerance
    refuses still passes when its worst error is at most :data:`F32_MAX_FACTOR` times the float32 reference's own
    worst error (+ atol), its RMS error at most :data:`F32_RMS_FACTOR` times the reference's own (+ atol), it is
    finite and non-finite exactly where the float32 reference is, and it correlates with the float64 result (rule 4).
    The yardstick is the reference's own error on this very case, so a candidate is never held to more accuracy than
    float32 gives the reference, and a wrong one (bf16 passes, a missing term, a bias) is many times past it."""
    first = compare_outputs(reference, candidate, tolerance)
    if first.ok or len(candidate) != len(reference) or len(reference_f64) != len(reference):
        return first
    max_abs = max_rel = 0.0
    words = []
    notes: list[str] = []
    for k, (r, r64, c) in enumerate(zip(reference, reference_f64, candidate)):
        atol, rtol = _tolerance(tolerance, k, r, notes, len(reference))
        got = compare_one(r, c, atol, rtol)
        if got.ok:
            max_abs, max_rel = max(max_abs, got.max_abs or 0.0), max(max_rel, got.max_rel or 0.0)
            continue
        if (r.dtype != np.float32 or c.dtype != np.float32 or got.max_abs is None or tuple(r64.shape) != tuple(r.shape)
                or tuple(c.shape) != tuple(r.shape) or np.dtype(r64.dtype) != np.float64):
            return first  # not a float32 output judged against a float64 result: the tolerance stands
        rflat, tflat, cflat = _flat(r), _flat(r64), _flat(c)
        sums = np.zeros(3)  # own squared, mine squared, count
        own_max = mine_max = 0.0
        stats = np.zeros(6)
        for lo in range(0, rflat.size, _CHUNK):
            r32, t, cc = (_as_float(a[lo:lo + _CHUNK]) for a in (rflat, tflat, cflat))
            finite = np.isfinite(r32)
            same_nonfinite = (np.isnan(cc[~finite]) & np.isnan(r32[~finite])) | (cc[~finite] == r32[~finite])
            if not np.isfinite(cc[finite]).all() or not same_nonfinite.all() or not np.isfinite(t[finite]).all():
                return first
            own, mine = np.abs(r32[finite] - t[finite]), np.abs(cc[finite] - t[finite])
            own_max, mine_max = max(own_max, float(own.max(initial=0.0))), max(mine_max, float(mine.max(initial=0.0)))
            sums += [float((own * own).sum()), float((mine * mine).sum()), float(own.size)]
            stats += _stats(t[finite], cc[finite])
        n = max(sums[2], 1.0)
        own_rms, mine_rms = math.sqrt(sums[0] / n), math.sqrt(sums[1] / n)
        if mine_max > F32_MAX_FACTOR * own_max + atol or mine_rms > F32_RMS_FACTOR * own_rms + atol or \
                _uncorrelated_stats(stats, r.dtype):
            return Comparison(False, got.max_abs, got.max_rel, f"{first.reason}; against the reference computed in float64 "
                              f"its error (worst {mine_max:.3g}, RMS {mine_rms:.3g}) exceeds {F32_MAX_FACTOR:g}x / "
                              f"{F32_RMS_FACTOR:g}x the float32 reference's own (worst {own_max:.3g}, RMS {own_rms:.3g})",
                              first.notes)
        words.append(f"worst {mine_max:.3g} vs own {own_max:.3g}, RMS {mine_rms:.3g} vs own {own_rms:.3g}")
        max_abs, max_rel = max(max_abs, got.max_abs), max(max_rel, got.max_rel or 0.0)
    return Comparison(True, max_abs, max_rel, "passed by the float32 rule: against the reference computed in float64 "
                      f"its error is within {F32_MAX_FACTOR:g}x (worst) and {F32_RMS_FACTOR:g}x (RMS) the float32 "
                      f"reference's own, + atol ({'; '.join(words)})", tuple(notes))


def check_inputs(pristine: Sequence[np.ndarray], after: Mapping[int, np.ndarray]) -> str | None:
    """``None`` when every input is bit-identical after the call, else the reason."""
    for k, before in enumerate(pristine):
        if k not in after:
            return f"input {k} was deleted or donated by the candidate (inputs must stay untouched)"
        now = after[k]
        if now.shape != before.shape or now.dtype != before.dtype or np.ascontiguousarray(now).tobytes() != np.ascontiguousarray(before).tobytes():
            return f"the candidate mutated input {k} (inputs must stay untouched)"
    return None


def _as_float(a: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(a):
        return np.stack([a.real, a.imag], axis=-1).astype(np.float64).reshape(-1)
    return a.astype(np.float64)


def _stats(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.array([r.size, r.sum(), c.sum(), (r * r).sum(), (c * c).sum(), (r * c).sum()], np.float64)


def _uncorrelated_stats(stats: np.ndarray, dtype: np.dtype) -> str | None:
    """Rule 4 from running sums over every element (no sample a candidate could aim at)."""
    n, sr, sc, srr, scc, src = (float(x) for x in stats)
    if n < 2:
        return None
    mr, mc = sr / n, sc / n
    var_r, var_c = max(srr / n - mr * mr, 0.0), max(scc / n - mc * mc, 0.0)
    rms, std = math.sqrt(srr / n), math.sqrt(var_r)
    eps = _eps(dtype)
    if std == 0.0 or std <= 10 * eps * rms:
        return None
    l2_diff = math.sqrt(max(srr - 2 * src + scc, 0.0))
    rel_l2 = l2_diff / max(math.sqrt(srr), np.finfo(np.float64).tiny)
    cov = src / n - mr * mc
    corr = 0.0 if var_c == 0.0 else cov / math.sqrt(var_r * var_c)
    if corr < MIN_CORRELATION or rel_l2 > MAX_RELATIVE_L2:
        return f"pearson {corr:.3f} < {MIN_CORRELATION} or relative L2 error {rel_l2:.3f} > {MAX_RELATIVE_L2}"
    return None


def _eps(dtype: np.dtype) -> float:
    if dtype.kind == "V":  # bfloat16/fp8 (ml_dtypes)
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)
    return float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.inexact) else 0.0


