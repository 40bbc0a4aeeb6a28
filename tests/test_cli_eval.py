"""``mk eval``: exit codes, JSON output, the table, and recording in the store."""

from __future__ import annotations

import json
import textwrap

import pytest

from mk.cli import main

TASK = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    from mk.task import ArgSpec, Scale, Task

    def reference(x, w):
        return jnp.tanh(x) * w

    TASK = Task("tanh_scale", reference, (ArgSpec("x", ("m", "n"), "float32"), ArgSpec("w", ("n",), "float32")),
                {"ci": Scale("ci", {"m": 8, "n": 32}), "full": Scale("full", {"m": 64, "n": 128})})
""")

GOOD = "import jax.numpy as jnp\n\ndef kernel(x, w):\n    return jnp.tanh(x) * w\n"
BAD = "import jax.numpy as jnp\n\ndef kernel(x, w):\n    return jnp.tanh(x) * w + 0.1\n"


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "task_tanh.py").write_text(TASK)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def test_eval_json_correct_records_in_store(files, capsys, tmp_path):
    db = tmp_path / "eval.duckdb"
    code = main(["eval", str(files / "task_tanh.py"), str(files / "good.py"), "--scale", "ci", "--json", "--db", str(db)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["reason"]
    assert out["status"] == "correct" and out["reason"] and out["suite_hash"]
    assert out["timing"]["measured"] is True and out["timing"]["speedup"] > 0
    store = pytest.importorskip("mk.store")
    with store.Store.open(db, read_only=True) as s:
        rows = s._conn.execute("select status, suite_hash from evaluations").fetchall()
    assert rows == [("correct", out["suite_hash"])]


def test_eval_incorrect_exits_1_with_table(files, capsys):
    code = main(["eval", str(files / "task_tanh.py"), str(files / "bad.py"), "--scale", "ci", "--no-time"])
    out = capsys.readouterr().out
    assert code == 1
    assert "incorrect" in out and "outside atol" in out


def test_eval_tpu_without_device_reports_not_measured(files, capsys):
    code = main(["eval", str(files / "task_tanh.py"), str(files / "good.py"), "--scale", "ci", "--target", "tpu", "--pure-jax", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["reason"]
    assert out["timing"]["measured"] is False and "no tpu device" in out["timing"]["reason"]


def test_eval_usage_errors_exit_2(files, capsys):
    assert main(["eval", str(files / "task_tanh.py"), str(files / "missing.py")]) == 2
    assert "does not exist" in " ".join(capsys.readouterr().err.split())
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(files / "task_tanh.py")])
    assert exc.value.code == 2
