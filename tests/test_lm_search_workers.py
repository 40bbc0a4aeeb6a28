"""An LM search in worker processes: the LM author is rebuilt from its spec in each spawned worker, its calls
(made against the local fake Gemini through the real google-genai client) come back with the node's result, and
every `lm_calls` row of the search carries its run and its node."""

from __future__ import annotations

import pytest

import search_support as sup
from fake_gemini import FakeGemini
from mk.authors import resolve_author
from mk.loaders import load_task
from mk.programs.search import Search
from mk.store import Store

from fake_gemini import Agents

pytestmark = pytest.mark.slow

PLANS = [{"plan": {"approach": "jax", "strategy": f"strategy number {i}: rewrite the scale as step {i}", "tiling": {},
                   "memory_placement": "", "pipelining": "", "expected_speedup": 1.0 + i, "risks": []}} for i in range(8)]
CODES = [{"code": sup.MID, "config_space": {}}, {"code": sup.FAST, "config_space": {}}, {"code": sup.SLOW, "config_space": {}},
         {"code": sup.WRONG, "config_space": {}}]


def test_an_lm_search_runs_in_two_worker_processes_and_every_call_has_its_run_and_node(tmp_path, monkeypatch):
    task = load_task(str(sup.write_task(tmp_path)))
    with FakeGemini() as fake:
        fake.route(Agents(plan=PLANS, code=CODES * 4, analysis=[{"analysis": {
            "bottleneck": "memory", "evidence": "one pass", "next_step": "", "decision": "stop", "expected_gain": 1.0}}]))
        monkeypatch.setenv("GEMINI_API_KEY", "test-key")  # the spawned workers inherit the environment
        monkeypatch.setenv("MK_GEMINI_BASE_URL", fake.base_url)
        with Store.open(tmp_path / "s.duckdb") as store:
            author, _ = resolve_author("gemini/gemini-2.5-flash", store=store)
            author.synthesize_tests = False
            assert author.spec == "lm:gemini/gemini-2.5-flash"
            search = Search(author, algorithm="beam", width=2, depth=2, branches=2, target="cpu", workers="process",
                            max_workers=2, evaluate=sup.stub_evaluate, store=store, tune=False)
            assert search._effective_config(task).workers == "process"  # rebuilt from its spec: not forced inline
            res = search.run(task)
            calls = store.query("SELECT run_id, node_id, agent FROM lm_calls")
            node_ids = {r["id"] for r in store.nodes(res.run_id)}
    assert len(res.nodes) >= 4 and res.best is not None
    agents = {c["agent"] for c in calls}
    assert "planner" in agents and "implementer" in agents  # the orchestrator planned, the workers implemented
    assert all(c["run_id"] == res.run_id for c in calls), calls
    assert all(c["node_id"] in node_ids for c in calls), [c for c in calls if c["node_id"] not in node_ids]
    implemented = {c["node_id"] for c in calls if c["agent"] == "implementer"}
    assert len(implemented) >= 4  # each node's worker-side calls are its own
