"""Sanity of the compiler's speed estimate without the device: libtpu's static schedule (cycles per compiled kernel
or XLA fusion, ``--xla_jf_dump_static_llo_profile_to``) on cases whose answer is known, per TPU chip.

    python -m evals.estimate_sanity                      # v6e and v5e
    python -m evals.estimate_sanity --chips v6e v5p tpu7x --out /tmp/es

Everything here is an ESTIMATE by libtpu's static scheduler, compiled for the chip without the chip; nothing ran on
a TPU. The expectations below were written before the first run; each case says whether it held.

1. ``steps``: an 8192 x 1024 float32 elementwise kernel with 8-, 32-, 128- and 512-row blocks. Expected: the
   estimate falls as blocks grow (per-grid-step overhead, as on the chip), 8-row blocks at least 4x 512-row ones.
2. ``xla-vs-pallas``: XLA's own fusion of that op against the best Pallas block. Expected within 2x either way.
3. ``matmul``: a 2048^3 bfloat16 matmul, XLA's against mk's Pallas matmul (mk/kernels/matmul) with 512 and 128
   blocks. Expected: XLA <= Pallas 512 <= Pallas 128.
4. ``clock``: the cycle rate at which XLA's matmul of case 3 would run at the chip's published bf16 peak
   (cycles / (flops / peak)): an upper bound on the rate the estimate assumes. Expected between 0.5 and 3 GHz.
5. ``hbm``: case 1's 512-row kernel moves 64 MiB; at case 4's rate its estimated time against the time that many
   bytes take at the chip's HBM bandwidth. Expected below 1: the static schedule does not model HBM stalls, so an
   estimate of speed must add the bytes moved (issue 23's model: the larger of the two).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger("evals.estimate_sanity")
RESULTS = Path(__file__).resolve().parent / "results"
ROWS, COLS = 8192, 1024
MM = 2048


def _elementwise(rows: int):
    import jax
    from jax.experimental import pallas as pl

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    return lambda x: pl.pallas_call(body, grid=(x.shape[0] // rows,), in_specs=[pl.BlockSpec((rows, COLS), lambda i: (i, 0))],
                                    out_specs=pl.BlockSpec((rows, COLS), lambda i: (i, 0)),
                                    out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _cycles(result: Any) -> int:
    """The program's estimated cycles: its Pallas kernels' and XLA's own fusions'."""
    if not result.ok:
        raise RuntimeError(f"{result.chip}: does not compile: {result.error}")
    return result.estimated_cycles


def check_chip(chip: str) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from mk.harness.chipcheck import compile_function
    from mk.hardware import get_spec
    from mk.kernels.matmul import tpu as mm

    spec = get_spec(chip)
    x = jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)
    steps = {rows: _cycles(compile_function(_elementwise(rows), x, chip=chip, estimate=True)) for rows in (8, 32, 128, 512)}
    xla_elementwise = _cycles(compile_function(lambda x: x * 2.0 + 1.0, x, chip=chip, estimate=True))
    a = jax.ShapeDtypeStruct((MM, MM), jnp.bfloat16)
    matmul = {"xla": _cycles(compile_function(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32), a, a,
                                              chip=chip, estimate=True))}
    for b in (512, 128):
        matmul[f"pallas-{b}"] = _cycles(compile_function(
            lambda x, w, b=b: mm.matmul_tpu(x, w, out_dtype=jnp.float32, block_m=b, block_n=b, block_k=b), a, a,
            chip=chip, estimate=True))
    peak = spec.peak_flops.get("bfloat16")
    clock = matmul["xla"] / (2 * MM ** 3 / peak) if peak else None
    moved = 2 * ROWS * COLS * 4
    hbm_ratio = (steps[512] / clock) / (moved / spec.hbm_bandwidth) if clock and spec.hbm_bandwidth else None
    best = min(steps.values())
    cases = [
        {"case": "steps", "value": {str(k): v for k, v in steps.items()}, "ratio": steps[8] / steps[512],
         "held": all(steps[a] > steps[b] for a, b in ((8, 32), (32, 128), (128, 512))) and steps[8] >= 4 * steps[512]},
        {"case": "xla-vs-pallas", "value": {"xla": xla_elementwise, "pallas-best": best}, "ratio": best / xla_elementwise,
         "held": 0.5 <= best / xla_elementwise <= 2.0},
        {"case": "matmul", "value": matmul, "ratio": matmul["pallas-128"] / matmul["xla"],
         "held": matmul["xla"] <= matmul["pallas-512"] <= matmul["pallas-128"]},
        {"case": "clock", "value": clock, "ratio": None, "held": clock is not None and 0.5e9 <= clock <= 3e9},
        {"case": "hbm", "value": hbm_ratio, "ratio": hbm_ratio, "held": hbm_ratio is not None and hbm_ratio < 1.0},
    ]
    return {"chip": chip, "cases": cases}


def _checked(chip: str) -> dict[str, Any]:
    from mk.harness.chipcheck import CompileRefused

    try:
        return check_chip(chip)
    except (CompileRefused, RuntimeError) as exc:  # a chip whose compiler fails here: a row that says so
        return {"chip": chip, "cases": [], "error": f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"[:300]}


def render(report: dict[str, Any]) -> str:
    lines = [f"# Static-schedule estimate sanity ({report['date']})", "",
             f"Command: `{report['command']}`  ", f"Compiler: {report['compiler']}", "",
             "Every figure is an **estimate** by libtpu's static scheduler for a chip mk compiled for without the chip; "
             "nothing ran on a TPU. The expectations (in `evals/estimate_sanity.py`) were written before the first run.",
             "", "| chip | case | estimate | ratio | expectation held |", "|---|---|---|---|---|"]
    for chip in report["chips"]:
        if chip.get("error"):
            lines.append(f"| {chip['chip']} | — | not compiled: {chip['error']} | | |")
        for c in chip["cases"]:
            value = c["value"]
            if isinstance(value, dict):
                shown = ", ".join(f"{k}: {v:,} cycles" for k, v in value.items())
            elif c["case"] == "clock":
                shown = f"{value / 1e9:.2f} GHz" if value else "—"
            else:
                shown = f"{value:.2f} of the HBM time" if value is not None else "—"
            ratio = f"{c['ratio']:.2f}" if c["ratio"] is not None else ""
            lines.append(f"| {chip['chip']} | {c['case']} | {shown} | {ratio} | {'yes' if c['held'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.estimate_sanity", description=__doc__.split("\n\n")[0])
    p.add_argument("--chips", nargs="+", default=["v6e", "v5e"])
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from mk.harness.compiler import versions

    report = {"command": ("python -m evals.estimate_sanity " + shlex.join(sys.argv[1:] if argv is None else argv)).strip(),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "compiler": versions("tpu"),
              "chips": [_checked(chip) for chip in args.chips]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimate_sanity.json").write_text(json.dumps(report, indent=2) + "\n")
    text = render(report)
    (out / "estimate_sanity.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
