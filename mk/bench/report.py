"""The benchmark report: ``report.md`` with the metrics, the per-task table and PNG plots, plus ``results.json``.

Plots (matplotlib, Agg backend):

* ``fast_p.png`` – the fast_p curve of each method (only when speed was measured);
* ``progress.png`` – by step (auto: iteration, best-of-n: sample, search: depth): the fraction
  of tasks with a correct kernel so far and, when measured, the floored geometric-mean speedup
  over all tasks of the best kernel so far.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from mk.bench.metrics import FAST_P
from mk.bench.results import BenchResult, TaskRow

log = logging.getLogger(__name__)

_STEP_LABEL = {"auto": "iteration", "best-of-n": "sample", "search": "depth"}


def progression(rows: list[TaskRow], method: str) -> list[dict[str, Any]]:
    """Per step k: fraction of tasks correct within the first k steps, and the floored geomean (all tasks) of the best so far."""
    mine = [r for r in rows if r.method == method]
    if not mine:
        return []
    key = (lambda s: s.depth) if method == "search" else (lambda s: s.step)
    top = max([key(s) for r in mine for s in r.progress] or [0])
    out = []
    for k in range(1, top + 1):
        correct, logs, measured = 0, 0.0, 0
        for r in mine:
            upto = [s for s in r.progress if key(s) <= k and s.status == "correct"]
            correct += bool(upto)
            speeds = [s.speedup for s in upto if s.speedup is not None]
            if speeds:
                measured += 1
                logs += math.log(max(max(speeds), 1.0))
        out.append({"step": k, "correct_rate": correct / len(mine), "geomean_all": math.exp(logs / len(mine)), "measured": measured})
    return out


def write_report(result: BenchResult, out: Path, *, plots: bool = True) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    if plots:
        result.plots = _plots(result, out)
    (out / "results.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
    path = out / "report.md"
    path.write_text(_markdown(result))
    result.report_path = str(path)
    return path


# --- markdown ----------------------------------------------------------------------------------------------
def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}x"


def _markdown(r: BenchResult) -> str:
    lines = [f"# mk bench: {r.suite} on {r.target}", ""]
    lines.append(f"- scale: `{r.scale or 'all'}` · methods: {', '.join(r.methods)} · author: `{r.author}` · tasks: "
                 f"{len({row.task for row in r.rows})} · bench id: `{r.bench_id}`")
    lines.append(f"- config: `{json.dumps(r.config, default=str)}`")
    if not r.can_time:
        lines.append(f"- **{r.speed_reason}** — speed metrics are not shown.")
    if r.stop_reason:
        tail = "" if r.stop_reason.startswith("interrupted") else " — skipped task runs count as not compiled and not correct."
        lines.append(f"- **{r.stop_reason}**{tail}")
    lines += ["", "## Metrics", "",
              "| method | compiled | correct | geomean speedup (correct, floored) | geomean speedup (all tasks) | "
              + " | ".join(f"fast_{p:g}" for p in FAST_P) + " |",
              "|---" * (5 + len(FAST_P)) + "|"]
    for m, met in r.metrics.items():
        if met.speed == "unmeasured":
            speed = ["not measured"] * 2 + ["not measured"] * len(FAST_P)
        else:
            speed = [_x(met.geomean_speedup), _x(met.geomean_speedup_all)] + [_pct(met.fast_p[f"fast_{p:g}"]) for p in FAST_P]
        lines.append(f"| {m} | {met.compiled}/{met.tasks} ({_pct(met.compilation_rate)}) | {met.correct}/{met.tasks} "
                     f"({_pct(met.correctness_rate)}) | " + " | ".join(speed) + " |")
    notes = [f"- {m}: {met.speed_note}" for m, met in r.metrics.items() if met.speed_note]
    lines += ["", *notes, "",
              "Definitions (see `mk/bench/metrics.py`): compiled / correct = at least one candidate compiled / was judged "
              "correct; fast_p = share of all tasks that are correct with measured speedup > p; geomean speedups floor "
              "regressions at 1.0x (the XLA baseline is kept); the all-tasks geomean also counts tasks without a correct "
              "kernel as 1.0x.", ""]
    for name, title in (("fast_p.png", "fast_p curve by method"), ("progress.png", "Progress by iteration / sample / depth")):
        if any(p.endswith(name) for p in r.plots):
            lines += [f"## {title}", "", f"![{title}]({name})", ""]
    if not any(p.endswith("fast_p.png") for p in r.plots) and r.plots:
        lines += ["(no fast_p curve: speed was not measured)", ""]
    if any(row.spread is not None for row in r.rows):
        lines += ["Each correct row's best kernel was timed again beside the other methods' on the same task (round-robin; "
                  "one set of runs where two methods kept the same kernel): its speedup is the median, the range is the "
                  "spread, and methods whose spreads overlap the fastest one's are a **tie** (the difference is noise).", ""]
    lines += ["## Per task", "", "| task | method | status | compiled | correct | speedup | candidates | seconds | best / reason |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in r.rows:
        speed = _x(row.speedup) if row.speedup is not None else ("not measured" if row.correct else "—")
        if row.spread is not None:  # timed again beside the other methods' kernels: median (min-max), ties named
            speed += f" ({row.spread[0]:.2f}-{row.spread[1]:.2f}, {len(row.speedup_runs)} runs)"
            if row.tied_with:
                speed += f", tie with {', '.join(row.tied_with)}"
        why = row.best if row.correct else row.reason
        why = (why or "").replace("|", "/").replace("\n", " ")
        lines.append(f"| {row.task} | {row.method} | {row.status} | {'yes' if row.compiled else 'no'} | "
                     f"{'yes' if row.correct else 'no'} | {speed} | {row.candidates} | {row.seconds:.1f} | {why[:160]} |")
    return "\n".join(lines) + "\n"


# --- plots -------------------------------------------------------------------------------------------------
def _plots(r: BenchResult, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    written = []
    measured = {m: met for m, met in r.metrics.items() if met.speed != "unmeasured" and met.fast_p_curve}
    if measured:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        _fast_p(ax, measured)
        top = max(p for met in measured.values() for p, _ in met.fast_p_curve)
        ax.set_xlim(0, top if top > 0 else 1.0)
        ax.set_xlabel("speedup threshold p (over the XLA baseline)")
        ax.set_ylabel("fast_p: share of tasks correct and faster than p")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"fast_p curve · {r.suite} on {r.target}")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "fast_p.png")
        plt.close(fig)
        written.append(str(out / "fast_p.png"))
    series = {m: progression(r.rows, m) for m in r.methods}
    series = {m: s for m, s in series.items() if s}
    show_speed = r.can_time and any(pt["measured"] for s in series.values() for pt in s)
    fig, axes = plt.subplots(1, 2 if show_speed else 1, figsize=(11 if show_speed else 6, 4.2), dpi=120, squeeze=False)
    ax = axes[0][0]
    one_step = bool(series) and all(len(s) == 1 for s in series.values())
    _by_step(ax, series, "correct_rate", one_step, lambda m: f"{m} (by {_STEP_LABEL[m]})", "{:.0%}")
    ax.set_ylabel("share of tasks with a correct kernel so far")
    ax.set_ylim(-0.02, 1.12 if one_step else 1.02)
    ax.set_title("correctness by step" + (" (one step: every method stopped after its first)" if one_step else ""),
                 fontsize=10 if one_step else None)
    ax.grid(alpha=0.3)
    if not series:
        why = "(the benchmark was interrupted first)" if r.stop_reason.startswith("interrupted") else \
            "(every task declined or failed to load)"
        ax.text(0.5, 0.5, f"no candidate was judged\n{why}", ha="center", va="center", transform=ax.transAxes)
    elif not one_step:  # bars carry their names on the axis
        ax.legend()
    if show_speed:
        ax2 = axes[0][1]
        _by_step(ax2, series, "geomean_all", one_step, lambda m: m, "{:.2f}x")
        ax2.set_ylabel("geomean speedup, best so far (floored at 1.0)")
        ax2.set_title("speedup by step (all tasks)")
        ax2.grid(alpha=0.3)
        if not one_step:
            ax2.legend()
    elif not r.can_time:
        fig.suptitle(r.speed_reason, fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "progress.png")
    plt.close(fig)
    written.append(str(out / "progress.png"))
    return written


def _fast_p(ax: Any, measured: dict[str, Any]) -> None:
    """Each method's fast_p curve as a step line in its own colour, dash pattern and width, with a marker at each
    reported threshold (so a curve of one point, or one drawn under an identical one, still shows), and the legend
    naming a curve identical to an earlier one; then the thresholds and, beyond p=6, a log axis."""
    curves = {m: [tuple(pt) for pt in met.fast_p_curve] for m, met in measured.items()}
    same = same_as(curves)
    for i, (m, met) in enumerate(measured.items()):
        ps, vals = zip(*met.fast_p_curve)
        style = line_style(i)
        marks = [j for j, p in enumerate(ps) if any(abs(p - q) < 1e-9 for q in FAST_P)] or [0]
        ax.step(ps, vals, where="post", label=f"{m} (n={met.tasks}){_same_note(m, same)}", linewidth=style["lw"],
                linestyle=style["ls"], color=style["color"], alpha=0.9, marker=style["marker"], markevery=marks,
                markersize=4 + 2 * style["lw"], markerfacecolor="none" if i else style["color"])
    for p in FAST_P:
        ax.axvline(p, color="grey", linewidth=0.5, linestyle=":")
    top = max(p for met in measured.values() for p, _ in met.fast_p_curve)
    if top > 6:  # linear over the reported thresholds, log beyond
        ax.set_xscale("symlog", linthresh=2.0)
        ticks = [t for t in (0, 0.5, 1, 1.5, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= top]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.legend()


def line_style(i: int) -> dict[str, Any]:
    """The i-th method's line: colour, dash pattern and width all differ, widest first, so a curve drawn on top of
    an identical one leaves it visible."""
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    dashes = ("-", "--", "-.", ":")
    return {"color": colors[i % len(colors)], "ls": dashes[i % len(dashes)], "lw": max(3.5 - 0.8 * i, 1.2),
            "marker": "osD^v<>"[i % 7]}


def same_as(curves: dict[str, list[Any]]) -> dict[str, str]:
    """``{method: earlier method with the identical curve}``, so a legend can say that a hidden curve is there."""
    out: dict[str, str] = {}
    seen: list[tuple[str, list[Any]]] = []
    for m, c in curves.items():
        twin = next((n for n, d in seen if d == c), None)
        if twin is not None:
            out[m] = twin
        else:
            seen.append((m, c))
    return out


def _same_note(m: str, same: dict[str, str]) -> str:
    return f" (same curve as {same[m]})" if m in same else ""


def _by_step(ax: Any, series: dict[str, list[dict[str, Any]]], key: str, one_step: bool, label: Any, fmt: str) -> None:
    """``key`` by step for each method: grouped bars with their values when every method has one step (a line of
    one point says nothing), else lines offset a little on x, with distinct styles, and identical curves named."""
    from matplotlib.ticker import MaxNLocator

    same = same_as({m: [round(p[key], 6) for p in s] for m, s in series.items()})
    if one_step:
        names = list(series)
        vals = [series[m][0][key] for m in names]
        bars = ax.bar(range(len(names)), vals, color=[line_style(i)["color"] for i in range(len(names))], width=0.6)
        for b, v in zip(bars, vals):
            ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=9,
                        xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(range(len(names)), [label(m) for m in names], fontsize=8)
        ax.set_xlim(-0.5 - 0.5 / len(names), len(names) - 0.5 + 0.5 / len(names))
        ax.set_xlabel("method (step 1)")
        return
    n = len(series)
    for i, (m, s) in enumerate(series.items()):
        style = line_style(i)
        shift = (i - (n - 1) / 2) * 0.06 if n > 1 else 0.0  # identical curves side by side, not on top of each other
        ax.plot([p["step"] + shift for p in s], [p[key] for p in s], marker=style["marker"], linestyle=style["ls"],
                linewidth=style["lw"], color=style["color"], alpha=0.9, label=label(m) + _same_note(m, same))
    ax.set_xlabel("iteration / sample / search depth")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


__all__ = ["line_style", "progression", "same_as", "write_report"]

