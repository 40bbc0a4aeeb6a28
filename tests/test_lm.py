"""LM resolution, accounting at the LM seam, budgets and the price table (offline, scripted engine)."""

from __future__ import annotations

import uuid

import dspy
import pytest
from lm_fakes import fresh_dspy
from dspy import lm15
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.exceptions import LMServerError

from mk.budget import Budget, BudgetMeter, Price, PriceTable
from mk.errors import BudgetExceeded, ConfigError
from mk.gemini import GeminiEngine
from mk.lm import Accountant, accounted, require_lm, resolve_lm
from mk.scopes import agent_scope, node_scope


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)


class ScriptedEngine:
    """A DSPy engine that answers from a script: text, or an exception to raise."""

    def __init__(self, *script, input_tokens=100, output_tokens=20):
        self.script = list(script)
        self.requests = []
        self.usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)

    def complete(self, request):
        self.requests.append(request)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return Response(id=None, model=request.model, message=Message.assistant([TextPart(item)]),
                        finish_reason="stop", usage=self.usage)

    def close(self):
        pass


def scripted_lm(*script, model="gemini/gemini-2.5-pro", cache=False, **kw):
    engine = ScriptedEngine(*script, **kw)
    return dspy.LM(model, engine=engine, cache=cache, num_retries=1), engine


# --- resolution --------------------------------------------------------------------
def test_resolution_order():
    env = {"MK_LM": "openai/gpt-4o-mini", "GEMINI_API_KEY": "k"}
    assert resolve_lm("anthropic/claude-sonnet-4", environ=env).kind == "explicit"
    mine = dspy.LM("openai/gpt-4o")
    assert resolve_lm(mine, environ=env).lm is mine
    choice = resolve_lm(environ=env)
    assert (choice.kind, choice.model) == ("env", "openai/gpt-4o-mini")
    gem = resolve_lm(environ={"GOOGLE_API_KEY": "k", "MK_GEMINI_MODEL": "gemini-2.5-flash"})
    assert (gem.kind, gem.model) == ("gemini", "gemini/gemini-2.5-flash")
    assert isinstance(gem.lm.engine, GeminiEngine) and gem.lm.engine.api_key == "k"
    vertex = resolve_lm(environ={"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_PROJECT": "p"})
    assert vertex.kind == "vertex" and vertex.lm.engine.vertexai and vertex.lm.engine.project == "p"
    off = resolve_lm(environ={})
    assert off.offline and off.lm is None and "GEMINI_API_KEY" in off.reason
    assert resolve_lm("offline", environ=env).offline
    assert resolve_lm(environ={"MK_LM": "offline", "GEMINI_API_KEY": "k"}).offline


def test_require_lm_says_how_to_configure(monkeypatch):
    with pytest.raises(ConfigError, match="GEMINI_API_KEY") as info:
        require_lm()
    assert "MK_LM" in str(info.value)
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    assert require_lm().kind == "gemini"
    with pytest.raises(ConfigError):
        resolve_lm(42)


# --- accounting --------------------------------------------------------------------
def test_every_call_is_recorded_with_agent_tokens_cost_and_cache_hits(tmp_path):
    from mk.store import Store

    lm, engine = scripted_lm("one", "two", cache=True, input_tokens=1000, output_tokens=100)
    with Store.open(tmp_path / "mk.duckdb") as store:
        accountant = Accountant(store, run_id="run-a")
        metered = accounted(lm, accountant)
        prompt = f"question {uuid.uuid4()}"
        with node_scope("n1"):
            with agent_scope("planner"):
                assert metered(prompt) == ["one"]
                assert metered(prompt) == ["one"]  # DSPy's cache
            with agent_scope("implementer"):
                assert metered(prompt + "?") == ["two"]
        assert len(engine.requests) == 2
        rows = store.query("SELECT agent, node_id, input_tokens, output_tokens, cost_usd, cache_hit FROM lm_calls "
                           "WHERE run_id = 'run-a' ORDER BY agent DESC, cache_hit")
    cost = (1000 * 1.25 + 100 * 10.0) / 1e6  # gemini-2.5-pro
    assert [(r["agent"], r["cache_hit"]) for r in rows] == [("planner", False), ("planner", True), ("implementer", False)]
    assert [r["input_tokens"] for r in rows] == [1000, 0, 1000] and all(r["node_id"] == "n1" for r in rows)
    assert [r["cost_usd"] for r in rows] == pytest.approx([cost, 0.0, cost])
    assert accountant.meter.usage().lm_calls == 2 and accountant.total_cost() == pytest.approx(2 * cost)
    assert type(lm) is dspy.LM and not hasattr(lm, "_mk_accountant")  # the original LM is untouched


def test_failed_calls_are_recorded_with_the_error():
    lm, engine = scripted_lm(lm15.ServerError("boom", status=503, retry_after=0.0),
                             lm15.ServerError("boom again", status=503, retry_after=0.0))
    accountant = Accountant()
    with pytest.raises(LMServerError), agent_scope("compile_fixer"):
        accounted(lm, accountant)("fix")
    (call,) = accountant.calls
    assert call.agent == "compile_fixer" and "boom again" in call.error and not call.cache_hit
    assert len(engine.requests) == 2  # DSPy retried once


def test_usage_still_reaches_dspy_usage_tracking():
    lm, _ = scripted_lm("[[ ## answer ## ]]\nyes\n\n[[ ## completed ## ]]")
    with dspy.context(lm=accounted(lm, Accountant()), track_usage=True):
        pred = dspy.Predict("question -> answer")(question="ok?")
    assert pred.get_lm_usage()["gemini/gemini-2.5-pro"]["prompt_tokens"] == 100


def test_unattributed_and_unpriced_calls():
    lm, _ = scripted_lm("x", model="somevendor/unknown-model")
    accountant = Accountant()
    accounted(lm, accountant)("hi")
    (call,) = accountant.calls
    assert call.agent == "unattributed" and call.cost_usd is None


# --- budgets -----------------------------------------------------------------------
def test_call_budget_stops_before_the_next_call():
    lm, engine = scripted_lm("a", "b", "c")
    metered = accounted(lm, Accountant(budget=Budget(max_lm_calls=2)))
    metered("1")
    metered("2")
    with pytest.raises(BudgetExceeded, match="LM-call budget spent: 2 of 2") as info:
        metered("3")
    assert len(engine.requests) == 2 and info.value.metadata["lm_calls"] == 2


def test_cost_budget():
    lm, engine = scripted_lm("a", "b", input_tokens=1_000_000, output_tokens=0)  # $1.25 per call
    metered = accounted(lm, Accountant(budget=Budget(max_cost_usd=1.0)))
    metered("1")
    with pytest.raises(BudgetExceeded, match="cost budget spent"):
        metered("2")
    assert len(engine.requests) == 1


def test_wall_time_budget_with_a_fake_clock():
    now = [0.0]
    meter = BudgetMeter(Budget(max_wall_s=10), clock=lambda: now[0])
    meter.check()
    now[0] = 10.5
    with pytest.raises(BudgetExceeded, match="wall-time budget spent: 10.5 s of 10.0 s"):
        meter.check()
    with pytest.raises(ConfigError):
        Budget(max_lm_calls=-1)


# --- prices ------------------------------------------------------------------------
def test_price_table_lookup_and_tiers():
    table = PriceTable.load()
    assert table.lookup("gemini/gemini-2.5-flash-lite").input == pytest.approx(0.10)
    assert table.lookup("vertex_ai/gemini-2.5-flash-preview-09-2025").output == pytest.approx(2.50)
    assert table.lookup("openai/gpt-5-mini").input == pytest.approx(0.25)
    assert table.lookup("no-such-model") is None
    pro = table.lookup("gemini-2.5-pro")
    assert pro.cost(100_000, 1000) == pytest.approx((100_000 * 1.25 + 1000 * 10) / 1e6)
    assert pro.cost(300_000, 1000) == pytest.approx((300_000 * 2.50 + 1000 * 15) / 1e6)
    assert Price(1.0, 2.0, cached_input=0.1).cost(1000, 0, cached_tokens=400) == pytest.approx((600 + 40) / 1e6)
