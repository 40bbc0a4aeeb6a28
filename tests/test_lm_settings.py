"""LM settings: the Gemini base URL, per-agent models (a cheaper fixer) and DSPy's cache folder, from the
environment, through the real google-genai client against a local fake Gemini."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import dspy
import pytest
from dspy.clients.cache import Cache
from dspy.dsp.utils.settings import DEFAULT_CONFIG

from fake_gemini import FakeGemini
from mk.authors import agent_models, resolve_author
from mk.lm import resolve_lm
from mk.loaders import load_task
from mk.programs.auto import Auto

from lm_fakes import BROKEN, EXAMPLES, KERNEL, PLAN_A, STOP, Agents


@pytest.fixture(autouse=True)
def _fresh_dspy(monkeypatch):
    monkeypatch.setattr(dspy, "cache", Cache(False, True, None))
    yield
    dspy.settings.configure(**copy.deepcopy(DEFAULT_CONFIG))


def test_agent_models_from_the_environment():
    assert agent_models({"MK_LM_COMPILE_FIXER": "gemini/gemini-2.5-flash", "MK_LM_PLANNER": " "}) == {
        "compile_fixer": "gemini/gemini-2.5-flash"}
    assert agent_models({"MK_LM_FIXER": "openai/gpt-4o-mini"}) == {"compile_fixer": "openai/gpt-4o-mini"}


def test_lm_gemini_uses_mks_engine_at_the_configured_base_url_and_a_cheaper_fixer(monkeypatch):
    with FakeGemini() as fake:
        monkeypatch.setenv("GEMINI_API_KEY", "test-key")
        monkeypatch.setenv("MK_GEMINI_BASE_URL", fake.base_url)
        monkeypatch.setenv("MK_LM_COMPILE_FIXER", "gemini/gemini-2.5-flash-lite")
        choice = resolve_lm("gemini/gemini-2.5-pro")
        assert "mk's Gemini engine" in choice.reason and type(choice.lm.engine).__name__ == "GeminiEngine"
        fake.route(Agents(plan=[{"plan": PLAN_A}], code=[{"code": BROKEN, "config_space": {}}],
                          fixed_code=[{"fixed_code": KERNEL, "explanation": "scale elementwise"}], analysis=[{"analysis": STOP}]))
        author, _ = resolve_author("gemini/gemini-2.5-pro")
        author.seeds, author.synthesize_tests = False, False
        task = load_task(str(EXAMPLES / "rmsnorm.py"))
        traj = Auto(author, target="cpu", iterations=1, tune=False).run(task.with_scales({"ci": task.scale("ci")}))
    assert traj.best is not None
    models = {s.asked: s.model for s in fake.seen}
    assert models["fixed_code"] == "gemini-2.5-flash-lite" and models["plan"] == models["code"] == "gemini-2.5-pro"
    assert all(s.api_key == "test-key" for s in fake.seen)


def test_dspy_cache_lives_in_mk_home(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DSPY_CACHEDIR"}
    env["MK_HOME"] = str(tmp_path / "home")
    out = subprocess.run([sys.executable, "-c", "import mk, dspy.clients as c; print(c.DISK_CACHE_DIR)"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == str(tmp_path / "home" / "dspy-cache"), out.stderr[-1000:]
