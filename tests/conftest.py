import os

import pytest

# Offline, deterministic, isolated: no user state, no network, no accelerator.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("mkhome")
    monkeypatch.setenv("MK_HOME", str(home))
    monkeypatch.setenv("MK_DB", str(home / "mk.duckdb"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(home / "dspy-cache"))
    for var in ("MK_LM", "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(var, raising=False)
    yield
