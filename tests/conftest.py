import os
from pathlib import Path

import pytest

# Offline, deterministic, isolated: no user state, no network, no accelerator.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(scope="session", autouse=True)
def _shared_compile_cache(tmp_path_factory):
    """One chip-compile cache for the session, shared by every xdist worker and the processes tests start: a device
    program one test compiled for a chip is not compiled again by the next (mk/harness/compile_cache.py)."""
    from mk.harness import compile_cache

    base = tmp_path_factory.getbasetemp()
    root = base.parent if base.name.startswith("popen-gw") else base
    if os.environ.get(compile_cache.ENV_VAR, "").lower() != "off":  # MK_COMPILE_CACHE=off: every compile runs
        os.environ[compile_cache.ENV_VAR] = str(root / "compile-cache")
    yield


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("mkhome")
    monkeypatch.setenv("MK_HOME", str(home))
    monkeypatch.setenv("MK_DB", str(home / "mk.duckdb"))
    monkeypatch.setenv("DSPY_CACHEDIR", str(home / "dspy-cache"))
    for var in ("MK_LM", "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(var, raising=False)
    yield


#: the mechanism each test module exercises (its marker); a module not named here is ``unit``. ``slow`` is marked
#: per test in its source, or by measurement in tests/slow_tests.txt (tests/tiers.py). The fast tier a developer
#: runs between changes is ``-m "not slow"``; CI runs everything.
MECHANISM = {
    "kernels": ("kernels/", "test_upstream_kernels.py", "test_rowwise_variants.py", "test_variants.py",
                "test_attention_template.py", "test_cross_entropy_template.py", "test_written_general.py",
                "test_score_mod.py"),
    "judge": ("test_adversarial.py", "test_structured_inputs.py", "test_r5_envelope.py", "test_r5_f32_rule.py",
              "test_gradient_rule.py", "test_harness_pipeline.py", "test_chip_compile.py", "test_heldout.py",
              "test_isolation.py", "test_policy.py", "test_static.py", "test_compare_fair.py", "test_compare_rejects.py",
              "test_program_work.py", "test_suite_common.py", "test_suite_kernelbench.py", "test_suite_production.py",
              "test_gpu_check.py", "test_compile.py", "test_backward.py", "test_unbuilt_sizes.py", "test_screen.py"),
    "e2e": ("test_optimize.py", "test_api_cli_parity.py", "test_optimize_lm.py", "test_cli_common_options.py",
            "test_cli_eval.py", "test_cli_kb.py",
            "test_cli_runs.py", "test_cli_tasks.py", "test_cli_usability.py", "test_hitl_cli.py", "test_api.py",
            "test_interrupts.py", "test_killed_runs.py", "test_bench_run.py", "test_bench_resume.py", "test_search.py",
            "test_auto.py", "test_modes_lm.py", "test_notebook.py", "test_packaging.py", "test_run_service.py",
            "test_author_memory.py", "test_session.py", "test_resume_budget.py", "test_ray_cluster.py",
            "test_lm_search_workers.py", "test_coverage_eval.py"),
}
_TESTS = Path(__file__).resolve().parent


def mechanism(path: Path) -> str:
    """``unit``, ``kernels``, ``judge`` or ``e2e`` for a test file (:data:`MECHANISM`)."""
    rel = path.resolve().relative_to(_TESTS).as_posix()
    for name, prefixes in MECHANISM.items():
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes):
            return name
    return "unit"


def pytest_collection_modifyitems(config, items):
    from tiers import slow_ids  # tests/slow_tests.txt: the tests measured slow (tests/tiers.py says how)

    slow = slow_ids()
    for item in items:
        item.add_marker(getattr(pytest.mark, mechanism(Path(str(item.fspath)))))
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
