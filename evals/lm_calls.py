"""LM calls per correct kernel and duplicate prompts, on scripted trajectories (offline, no key).

    python -m evals.lm_calls [--out evals/results/lm_calls.json]

The model is the local fake Gemini (``tests/fake_gemini.py``) behind the real
google-genai client and mk's DSPy engine, answering each sub-agent from a fixed
script (the same scripts as ``tests/test_lm_feedback.py``). DSPy's response
cache is on (in memory), as it is for a user. Per scenario it records:

- ``calls``: requests that reached the model, by sub-agent;
- ``cache_hits``: sub-agent calls DSPy's cache answered (a repeated prompt, so no new sample);
- ``duplicate_prompts``: requests whose whole prompt (system + contents) equals an earlier request's;
- ``correct_kernels`` and ``calls_per_correct_kernel``.

Scenarios:

- ``auto_cpu_feedback``: rmsnorm (ci) on cpu: a wrong kernel, then a try/except fallback the static check rejects,
  a fix with a shape error, a second fix that is correct, the analyst stops (the judge is mk's harness);
- ``auto_tpu_no_device``: a bf16 matmul on tpu without a TPU: the hardware brief's skeleton is correct at once, the
  analyst is not asked (nothing timed) and the run stops after the first correct kernel;
- ``beam_2x2``: a beam search (width 2, depth 2, two iterations per node) over a stub judge whose model keeps
  proposing the same four strategies.

The recorded ``baseline`` is this script run on the code before issue 12 (commit ac181ef, extracted with
``git archive`` into a folder that is put first on ``PYTHONPATH``, with ``mk/programs``, ``mk/signatures``,
``mk/data`` and ``mk/retrievers`` linked to that folder's own copies)::

    PYTHONPATH=/tmp/base python evals/lm_calls.py --label "before: ac181ef" --out /tmp/before.json
    python -m evals.lm_calls --baseline /tmp/before.json
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "evals" / "results" / "lm_calls.json"
COMMAND = "python -m evals.lm_calls"


KERNEL = '''
import jax
import jax.numpy as jnp


def kernel(x, weight, eps):
    x32 = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * jax.lax.rsqrt(ms + eps) * weight).astype(x.dtype)
'''
BROKEN = KERNEL.replace(" * weight)", " @ weight[:3])")  # a trace-time shape error
WRONG = KERNEL.replace(" * weight)", ")")  # compiles; the weight is ignored
STOP = {"bottleneck": "memory", "evidence": "one read and one write of x; at the memory floor", "next_step": "",
        "decision": "stop", "expected_gain": 1.0}
CONTINUE = {"bottleneck": "memory", "evidence": "HBM at 40% of peak", "next_step": "fuse the cast into the load",
            "decision": "continue", "expected_gain": 1.3}
PLAN_A = {"approach": "jax", "strategy": "Compute the mean of squares in f32 and scale in one fused pass over x.",
          "tiling": {}, "memory_placement": "", "pipelining": "", "expected_speedup": 1.2, "risks": []}
PLAN_B = {**PLAN_A, "strategy": "Use rsqrt on the row statistics and multiply by the weight broadcast over rows."}
TRY_EXCEPT = '''
import jax
import jax.numpy as jnp


def kernel(x, weight, eps):
    x32 = x.astype(jnp.float32)
    try:
        ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    except Exception:
        ms = jnp.ones_like(x32[..., :1])
    return (x32 * jax.lax.rsqrt(ms + eps) * weight).astype(x.dtype)
'''


def _tpu_skeleton() -> str:
    """The hardware brief's TPU skeleton (read from the source, so an older mk measured with this script has it too)."""
    import ast

    tree = ast.parse((ROOT / "programs" / "lm_author.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "TPU_SKELETON" for t in node.targets):
            return node.value.func.value.value.strip()
    raise SystemExit("no TPU_SKELETON in programs/lm_author.py")


def _matmul_task() -> Any:
    import jax.numpy as jnp

    from mk.task import ArgSpec, Scale, Task, Tolerance

    return Task("mm", lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype),
                (ArgSpec("x", ("M", "K"), "bfloat16"), ArgSpec("y", ("K", "N"), "bfloat16")),
                {"ci": Scale("ci", {"M": 256, "K": 1024, "N": 256})}, tolerance=Tolerance(2e-2, 2e-2))


def _setup() -> None:
    sys.path.insert(0, str(ROOT / "tests"))  # the fake server and the scripts live with the tests
    import dspy
    from dspy.clients.cache import Cache

    dspy.cache = Cache(False, True, None)  # DSPy's response cache, in memory only, empty


def _lm(fake: Any, accountant: Any) -> Any:
    from mk.gemini import gemini_lm
    from mk.lm import accounted

    return accounted(gemini_lm("gemini-2.5-flash", api_key="eval-key", base_url=fake.base_url, timeout_s=30, num_retries=0),
                     accountant)


def _measure(name: str, fake: Any, accountant: Any, correct: int, extra: dict[str, Any]) -> dict[str, Any]:
    prompts = [s.prompt for s in fake.seen]
    seen: set[str] = set()
    dups = collections.Counter()
    for s, p in zip(fake.seen, prompts):
        if p in seen:
            dups[s.asked or "?"] += 1
        seen.add(p)
    calls = collections.Counter(s.asked or "?" for s in fake.seen)
    agent_of = {"plan": "planner", "code": "implementer", "fixed_code": "compile_fixer", "analysis": "profile_analyst",
                "test_cases": "test_synthesizer"}
    hits = collections.Counter(c.agent for c in accountant.calls if c.cache_hit)
    total = sum(calls.values())
    return {"scenario": name, "calls": total, "calls_by_agent": {agent_of.get(k, k): v for k, v in calls.items()},
            "cache_hits": sum(hits.values()), "cache_hits_by_agent": dict(hits),
            "duplicate_prompts": sum(dups.values()), "duplicate_prompts_by_agent": {agent_of.get(k, k): v for k, v in dups.items()},
            "correct_kernels": correct, "calls_per_correct_kernel": round(total / correct, 2) if correct else None, **extra}


def auto_cpu_feedback() -> dict[str, Any]:
    from fake_gemini import Agents, FakeGemini

    from mk.lm import Accountant
    from mk.loaders import load_task
    from mk.programs.auto import Auto
    from mk.programs.lm_author import LMAuthor

    task = load_task(str(ROOT / "examples" / "rmsnorm.py"))
    task = task.with_scales({"ci": task.scale("ci")})
    with FakeGemini() as fake:
        fake.route(Agents(
            plan=[{"plan": PLAN_A}, {"plan": PLAN_B}],
            code=[{"code": WRONG, "config_space": {}}, {"code": TRY_EXCEPT, "config_space": {}}],
            fixed_code=[{"fixed_code": BROKEN, "explanation": "removed the try/except"},
                        {"fixed_code": KERNEL, "explanation": "scale elementwise by the weight"}],
            analysis=[{"analysis": STOP}]))
        accountant = Accountant()
        traj = Auto(LMAuthor(_lm(fake, accountant), seeds=False, synthesize_tests=False), target="cpu", iterations=3,
                    tune=False).run(task)
        correct = sum(1 for s in traj.snapshots if s.correct)
        return _measure("auto_cpu_feedback", fake, accountant, correct, {
            "iterations": len(traj.snapshots), "statuses": [s.status for s in traj.snapshots], "stop_reason": traj.stop_reason})


def auto_tpu_no_device() -> dict[str, Any]:
    from fake_gemini import Agents, FakeGemini
    from mk.lm import Accountant
    from mk.programs.auto import Auto
    from mk.programs.lm_author import LMAuthor

    plan = {"approach": "pallas", "strategy": "Tile the matmul with an f32 VMEM accumulator over the k axis.",
            "tiling": {"block_m": 256, "block_n": 256, "block_k": 512}, "memory_placement": "blocks in VMEM",
            "pipelining": "k last", "expected_speedup": 1.1, "risks": []}
    with FakeGemini() as fake:
        fake.route(Agents(plan=[{"plan": plan}], code=[{"code": _tpu_skeleton(), "config_space": {}}],
                          analysis=[{"analysis": STOP}]))
        accountant = Accountant()
        author = LMAuthor(_lm(fake, accountant), seeds=False, synthesize_tests=False)
        traj = Auto(author, target="tpu", iterations=4, tune=False).run(_matmul_task())
        correct = sum(1 for s in traj.snapshots if s.correct)
        return _measure("auto_tpu_no_device", fake, accountant, correct, {
            "iterations": len(traj.snapshots), "statuses": [s.status for s in traj.snapshots], "stop_reason": traj.stop_reason,
            "notice": author.device_notice("tpu") if hasattr(author, "device_notice") else None})


def beam_2x2() -> dict[str, Any]:
    import search_support as sup
    from fake_gemini import Agents, FakeGemini

    from mk.lm import Accountant
    from mk.loaders import load_task
    from mk.programs.lm_author import LMAuthor
    from mk.programs.search import Search
    from mk.store import Store

    strategies = ["Fold the doubling into one tanh pass and scale once at the end of the row.",
                  "Compute tanh once and add it to itself instead of multiplying by two.",
                  "Use a single fused multiply after tanh so XLA emits one elementwise loop.",
                  "Split the rows into two halves and process each with tanh then scale."]
    plans = [{"plan": {**PLAN_A, "strategy": s}} for s in strategies]
    codes = [{"code": f"# speed {1.5 + 0.1 * i}\nimport jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0 + {i} * 0.0\n",
              "config_space": {}} for i in range(20)]
    with tempfile.TemporaryDirectory() as tmp, FakeGemini() as fake:
        task = load_task(str(sup.write_task(Path(tmp))))
        fake.route(Agents(plan=[plans[0], plans[0], plans[1], plans[1], plans[2], plans[0], plans[3], plans[2], plans[3]],
                          code=codes, analysis=[{"analysis": CONTINUE}]))
        accountant = Accountant()
        author = LMAuthor(_lm(fake, accountant), seeds=False, synthesize_tests=False)
        with Store.open(Path(tmp) / "s.duckdb") as store:
            res = Search(author, algorithm="beam", width=2, depth=2, branches=2, iterations=2, target="cpu", workers="inline",
                         evaluate=sup.stub_evaluate, store=store, tune=False).run(task)
            snaps = store.snapshots(res.run_id)
        correct = len({s["code"] for s in snaps if s["status"] == "correct"})
        return _measure("beam_2x2", fake, accountant, correct, {
            "nodes": len(res.nodes), "node_statuses": {n.key: n.status for n in res.nodes}, "stop_reason": res.stop_reason,
            "judge": "stub (tests/search_support.py): the search's calls are under test, not the harness"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--label", default="this tree", help="what code was measured (recorded with the numbers)")
    parser.add_argument("--baseline", help="a results file of this script run on older code, kept beside the numbers")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    _setup()
    started = time.time()
    scenarios = [auto_cpu_feedback(), auto_tpu_no_device(), beam_2x2()]
    import mk

    data = {"command": COMMAND, "label": args.label, "mk": str(Path(mk.__file__).resolve().parent), "date": time.strftime("%Y-%m-%d", time.gmtime()), "seconds": round(time.time() - started, 1),
            "model": "fake Gemini (tests/fake_gemini.py) behind google-genai and mk.gemini; DSPy cache in memory",
            "scenarios": scenarios,
            "totals": {"calls": sum(s["calls"] for s in scenarios), "duplicate_prompts": sum(s["duplicate_prompts"] for s in scenarios),
                       "cache_hits": sum(s["cache_hits"] for s in scenarios),
                       "correct_kernels": sum(s["correct_kernels"] for s in scenarios)}}
    if args.baseline:
        data["baseline"] = json.loads(Path(args.baseline).read_text())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    for s in scenarios:
        print(f"{s['scenario']}: {s['calls']} calls ({s['calls_by_agent']}), {s['correct_kernels']} correct -> "
              f"{s['calls_per_correct_kernel']} calls per correct kernel; {s['duplicate_prompts']} duplicate prompts, "
              f"{s['cache_hits']} cache hits")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
