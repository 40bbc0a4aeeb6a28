"""The real google-genai client, through mk's DSPy engine, against a fake Gemini on loopback."""

from __future__ import annotations

import time
import uuid

import dspy
import pytest
from lm_fakes import fresh_dspy
from dspy.utils.exceptions import LMAuthError, LMProviderError, LMServerError, LMTimeoutError

from fake_gemini import FakeGemini, error, malformed, ok, slow
from dspy.lm15 import Message, Request

from mk.gemini import AgentSettings, GeminiEngine, gemini_lm
from mk.lm import Accountant, accounted
from mk.scopes import agent_scope, node_scope


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    yield from fresh_dspy(monkeypatch)


@pytest.fixture
def fake():
    with FakeGemini() as server:
        yield server


def _lm(fake, *, num_retries=0, timeout_s=5.0, model="gemini-2.5-flash", **kw):
    return gemini_lm(model, api_key="test-key", base_url=fake.base_url, timeout_s=timeout_s,
                     num_retries=num_retries, cache=False, **kw)


def test_success_returns_text_and_usage(fake):
    fake.script(ok("hello there", input_tokens=7, output_tokens=3, thoughts=4, thought_text="thinking..."),
                ok("hello again", input_tokens=7, output_tokens=3, thoughts=4, thought_text="more thinking"))
    lm = _lm(fake)
    response = lm(Request(model=lm.model, messages=(Message.user("hi"),), system="be brief"))
    assert response.text == "hello there"
    assert response.usage.input_tokens == 7 and response.usage.reasoning_tokens == 4
    assert lm("again?") == [{"text": "hello again", "reasoning_content": "more thinking"}]
    seen = fake.seen[0]
    assert seen.model == "gemini-2.5-flash" and seen.api_key == "test-key"
    assert seen.body["systemInstruction"]["parts"][0]["text"] == "be brief"
    assert seen.text == "hi"
    usage = lm.history[-1]["usage"]
    # Gemini bills thinking as output: output = visible + thinking
    assert usage["prompt_tokens"] == 7 and usage["completion_tokens"] == 7


def test_rate_limit_then_success_is_retried_by_dspy(fake):
    fake.script(error(429, "quota", retry_delay=0.01), ok("after the wait"))
    lm = _lm(fake, num_retries=2)
    assert lm("hi") == ["after the wait"]
    assert len(fake.seen) == 2


def test_server_errors_until_retries_are_exhausted(fake):
    fake.script(*[error(503, "overloaded", retry_after=0.01)] * 3, ok("never reached"))
    lm = _lm(fake, num_retries=2)
    with pytest.raises(LMServerError) as info:
        lm("hi")
    assert "503" in str(info.value)
    assert len(fake.seen) == 3  # one try + two retries, then DSPy gives up


def test_auth_error_is_not_retried(fake):
    fake.script(error(401, "API key not valid"), ok("never reached"))
    with pytest.raises(LMAuthError):
        _lm(fake, num_retries=3)("hi")
    assert len(fake.seen) == 1


def test_malformed_body_is_a_clear_error(fake):
    fake.script(malformed(), ok("never reached"))
    with pytest.raises(LMProviderError) as info:
        _lm(fake, num_retries=3)("hi")
    assert "cannot read" in str(info.value)
    assert len(fake.seen) == 1


def test_slow_answer_times_out(fake):
    fake.script(slow(8.0))
    start = time.perf_counter()
    with pytest.raises(LMTimeoutError) as info:
        _lm(fake, timeout_s=0.3)("hi")
    assert time.perf_counter() - start < 6.0  # well before the answer (it took 2.6 s on a loaded 2-core machine)
    assert "0.3 s" in str(info.value)


def test_temperature_and_thinking_per_sub_agent(fake):
    fake.script(ok("a"), ok("b"), ok("c"))
    lm = _lm(fake, agent_settings={"compile_fixer": AgentSettings(temperature=0.1, thinking_budget=256),
                                   "planner": AgentSettings(temperature=1.0, thinking_budget=4096)})
    with agent_scope("compile_fixer"):
        lm("fix it")
    with agent_scope("planner"):
        lm("plan it")
    lm("nobody", temperature=0.5)  # an explicit request value wins; no agent: no thinking config
    fix, plan, other = (s.generation_config for s in fake.seen)

    def budget(cfg):  # google-genai may send the proto field in either JSON spelling
        thinking = cfg["thinkingConfig"]
        return thinking.get("thinkingBudget", thinking.get("thinking_budget"))

    assert fix["temperature"] == pytest.approx(0.1) and budget(fix) == 256
    assert plan["temperature"] == pytest.approx(1.0) and budget(plan) == 4096
    assert other["temperature"] == pytest.approx(0.5) and "thinkingConfig" not in other


def test_engine_needs_a_key_or_vertex():
    from dspy.utils.exceptions import LMNotConfiguredError

    lm = dspy.LM("gemini/gemini-2.5-flash", engine=GeminiEngine(), num_retries=0, cache=False)
    with pytest.raises(LMNotConfiguredError, match="GEMINI_API_KEY"):
        lm("hi")


class AnswerQuestion(dspy.Signature):
    """Answer the question in one word."""

    question: str = dspy.InputField(desc="a question")
    answer: str = dspy.OutputField(desc="one word")


def test_end_to_end_predict_recorded_in_store(fake, tmp_path):
    from mk.store import Store

    fake.script(ok("[[ ## answer ## ]]\nblue\n\n[[ ## completed ## ]]", input_tokens=1000, output_tokens=200, thoughts=300))
    store = Store.open(tmp_path / "mk.duckdb")
    try:
        accountant = Accountant(store, run_id="run-1")
        base = gemini_lm("gemini-2.5-flash", api_key="k", base_url=fake.base_url, timeout_s=5, num_retries=0)
        lm = accounted(base, accountant)
        question = f"What colour is the sky? ({uuid.uuid4()})"
        with dspy.context(lm=lm), node_scope("node-7"), agent_scope("planner"):
            first = dspy.Predict(AnswerQuestion)(question=question)
            again = dspy.Predict(AnswerQuestion)(question=question)  # DSPy's cache answers this one
        assert first.answer == again.answer == "blue"
        assert len(fake.seen) == 1
        rows = store.query(
            """SELECT count(*) AS calls, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                      sum(cost_usd) AS cost_usd, count(*) FILTER (WHERE cache_hit) AS cache_hits,
                      min(agent) AS agent, min(node_id) AS node, min(model) AS model
               FROM lm_calls WHERE run_id = 'run-1'""")
        (row,) = rows
        assert row["calls"] == 2 and row["cache_hits"] == 1
        assert row["input_tokens"] == 1000 and row["output_tokens"] == 500
        # gemini-2.5-flash: $0.30/M in, $2.50/M out (thinking billed as output)
        assert row["cost_usd"] == pytest.approx((1000 * 0.30 + 500 * 2.50) / 1e6)
        assert (row["agent"], row["node"], row["model"]) == ("planner", "node-7", "gemini/gemini-2.5-flash")
        assert store.lm_spend("run-1")["calls"] == 2
    finally:
        store.close()
