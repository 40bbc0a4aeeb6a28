"""`mk tasks`: table and JSON listings, errors, and a 50-task dataset listed fast without allocating."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from mk.cli import main

FIX = Path(__file__).parent / "fixtures" / "tasks"


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")


def test_table_lists_kinds_shapes_and_tolerances(capsys):
    assert main(["tasks", str(FIX / "good")]) == 0
    out = capsys.readouterr().out
    for text in ("maxkernel_rmsnorm", "jaxbench_xent", "softmax_module", "gelu_factory", "maxkernel_embed",
                 "x: f32[64,256]", "ids: i32[48] (native)", "x: bf16[8,128]", "x: f32[4096,8192]",
                 "eps=1e-06", "label_smoothing=0.0", "1e-05,0.0001", "0.02", "5 task(s)"):
        assert text in out, text
    assert "not_a_task" not in out


def test_table_names_tasks_as_json_does_with_the_id_that_loads_them(capsys):
    """The table showed the file stem where --json (and reports) show the task's name."""
    assert main(["tasks", str(FIX / "good"), "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert main(["tasks", str(FIX / "good")]) == 0
    out = capsys.readouterr().out
    assert any(e["name"] != e["id"] for e in entries)
    for e in entries:
        assert e["name"] in out and (e["id"] == e["name"] or f"id: {e['id']}" in out), e


def test_json_is_a_list_of_task_descriptions(capsys):
    assert main(["tasks", str(FIX / "good"), "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    by_id = {e["id"]: e for e in entries}
    assert sorted(by_id) == ["gelu_factory", "jaxbench_xent", "maxkernel_embed", "maxkernel_rmsnorm", "softmax_module"]
    rms = by_id["maxkernel_rmsnorm"]
    assert rms["name"] == "rmsnorm_fixture" and rms["kind"] == "maxkernel"
    assert rms["scales"] == {"full": [[64, 256], [256]]} and rms["static"] == {"eps": 1e-6}
    assert rms["atol"] == 1e-5 and rms["locator"]["kind"] == "maxkernel"
    assert by_id["maxkernel_embed"]["atol"] == [1e-5, 1e-4]
    assert by_id["softmax_module"]["scales"] == {"full": [[4096, 8192]], "ci": [[16, 128]]}


def test_scale_filter(capsys):
    assert main(["tasks", str(FIX / "good"), "--json", "--scale", "ci"]) == 0
    by_id = {e["id"]: e for e in json.loads(capsys.readouterr().out)}
    assert by_id["softmax_module"]["scales"] == {"ci": [[16, 128]]}
    assert by_id["maxkernel_rmsnorm"]["scales"] == {} and "no scale 'ci'" in by_id["maxkernel_rmsnorm"]["note"]
    assert main(["tasks", str(FIX / "good" / "softmax_module.py"), "--scale", "ci"]) == 0
    out = capsys.readouterr().out
    assert "f32[16,128]" in out and "f32[4096,8192]" not in out


def test_broken_tasks_are_listed_with_errors_and_exit_1(capsys):
    assert main(["tasks", str(FIX / "broken"), "--json"]) == 1
    entries = json.loads(capsys.readouterr().out)
    errors = {e["id"]: e["error"] for e in entries}
    assert "syntax error at line 7" in errors["syntax_error_module"]
    assert "missing reference.py" in errors["no_reference"]
    assert main(["tasks", str(FIX / "broken")]) == 1
    out = capsys.readouterr().out
    assert "failed to load" in out and "error" in out and "no_computation" in out


def test_missing_path_is_a_clean_error(capsys, tmp_path):
    assert main(["tasks", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_builtin_suite_listing(capsys, monkeypatch):
    import mk
    from mk.loaders import task_from_callable

    def load_builtin(task_id):
        import jax.numpy as jnp

        return task_from_callable(jnp.tanh, {"x": ((8, 128), "bfloat16")}, name=task_id.split(":")[1])

    fake = types.SimpleNamespace(load_builtin=load_builtin, list_builtin=lambda: ["jaxbench:12p_RMSNorm", "jaxbench:8p_GEMM"])
    monkeypatch.setitem(sys.modules, "mk.suite", fake)
    monkeypatch.setattr(mk, "suite", fake, raising=False)
    assert main(["tasks", "jaxbench", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [(e["id"], e["name"]) for e in entries] == [("jaxbench:12p_RMSNorm", "12p_RMSNorm"), ("jaxbench:8p_GEMM", "8p_GEMM")]
    assert main(["tasks", "jaxbench:8p_GEMM"]) == 0
    assert "bf16[8,128]" in capsys.readouterr().out


_REFERENCE = '''
import jax
import jax.numpy as jnp

N = 16384  # (16384, 16384) float32 = 1 GiB per input


def get_inputs():
    k1, k2 = jax.random.split(jax.random.PRNGKey({i}))
    x = jax.random.normal(k1, (N, N), dtype=jnp.float32)
    w = jnp.ones((N, N), dtype=jnp.float32) * 0.5
    ids = jnp.arange(N * 64, dtype=jnp.int32) % N
    return [x, w, ids], [{i}]


def computation(x, w, ids, k):
    return x @ w + k + jnp.take(x.ravel(), ids).sum()
'''


def test_lists_50_task_dataset_fast_without_allocating(tmp_path):
    root = tmp_path / "dataset"
    for i in range(50):
        d = root / f"category{i % 5}" / f"task_{i:02d}"
        d.mkdir(parents=True)
        (d / "reference.py").write_text(_REFERENCE.format(i=i))
        (d / "kernel_task.yaml").write_text(f"name: task_{i:02d}\natol: 1.0e-2\nrtol: [1.0e-2]\n")
    script = textwrap.dedent(f"""
        import json, sys
        from mk.cli import main
        rc = main(["tasks", {str(root)!r}, "--json"])
        # VmHWM is this process's own peak; ru_maxrss would also carry the forking parent's size over exec
        hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
        sys.stderr.write("\\nRESULT " + json.dumps({{"rc": rc, "maxrss_kb": hwm}}))
    """)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    result = json.loads(proc.stderr.rsplit("RESULT ", 1)[1])
    entries = json.loads(proc.stdout)
    assert result["rc"] == 0, proc.stderr[-2000:]
    assert len(entries) == 50 and all("error" not in e for e in entries)
    assert entries[0]["id"] == "category0/task_00"
    assert entries[0]["scales"] == {"full": [[16384, 16384], [16384, 16384], [1048576]]}
    assert elapsed < 30, f"listing 50 tasks took {elapsed:.1f}s"
    # jax alone is ~150-250 MiB; one materialised input would add 1 GiB (and 50 tasks, 100+ GiB).
    assert result["maxrss_kb"] < 700 * 1024, f"peak RSS {result['maxrss_kb'] / 1024:.0f} MiB: inputs were allocated"


def test_real_builtin_suite_lists_without_errors(capsys):
    pytest.importorskip("mk.suite")
    assert main(["tasks", "jaxbench", "--json", "--scale", "ci"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries and all("error" not in e and e["kind"] == "builtin" for e in entries)
    assert any(e["id"] == "jaxbench:12p_RMSNorm" for e in entries)


def test_a_broken_task_file_is_a_usage_error_for_tasks_and_optimize_alike(tmp_path):
    from mk.cli import main as cli

    bad = tmp_path / "broken_task.py"
    bad.write_text("import jax\nTASK = (\n")
    assert cli(["tasks", str(bad)]) == 2
    assert cli(["optimize", str(bad), "--lm", "offline", "--db", str(tmp_path / "db.duckdb"), "--out", str(tmp_path / "o")]) == 2
