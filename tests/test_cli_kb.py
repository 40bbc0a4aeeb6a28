"""``mk kb`` sub-commands end to end (in-process, isolated store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mk.cli import main

JAX_DOCS = Path(__file__).resolve().parents[2] / "shared" / "kb" / "jax-docs"


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Accumulators\n\nKeep a VMEM scratch accumulator in f32.\n\n"
                               "```python\ndef acc_kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n```\n")
    (root / "b.rst").write_text("Triton\n======\n\nnum_warps and num_stages tune the GPU kernel.\n")
    return root


def test_add_search_stats_rebuild(docs, tmp_path, capsys):
    kb = str(tmp_path / "kb")
    assert main(["kb", "--kb", kb, "--no-builtin", "add", str(docs), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"] == 2 and report["code_blocks_dropped"] == 0  # kernel code blocks are kept

    assert main(["kb", "--kb", kb, "search", "VMEM", "accumulator", "--k", "1", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 1 and hits[0]["doc"] == "a.md" and hits[0]["score"] > 0

    assert main(["kb", "--kb", kb, "search", "num_warps"]) == 0
    assert "Triton" in capsys.readouterr().out

    assert main(["kb", "--kb", kb, "search", "qqqnothing"]) == 1
    assert "no matching passages" in capsys.readouterr().out

    assert main(["kb", "--kb", kb, "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["passages"] == 2 and stats["builtin"] is False

    assert main(["kb", "--kb", kb, "add", str(docs), "--include-code", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["code_blocks_dropped"] == 0
    assert main(["kb", "--kb", kb, "rebuild", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passages"] == 2


def test_kb_dir_from_env_and_errors(docs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MK_KB_DIR", str(tmp_path / "envkb"))
    assert main(["kb", "--no-builtin", "add", str(docs)]) == 0
    assert (tmp_path / "envkb" / "manifest.json").exists()
    capsys.readouterr()
    assert main(["kb", "add", str(tmp_path / "missing")]) == 2
    assert "no such file" in " ".join(capsys.readouterr().err.split())


@pytest.mark.skipif(not JAX_DOCS.is_dir(), reason=f"{JAX_DOCS} (the JAX docs test corpus) is not present")
def test_jax_docs_vmem_scratch_demo(tmp_path, capsys):
    kb = str(tmp_path / "kb")
    assert main(["kb", "--kb", kb, "--no-builtin", "add", str(JAX_DOCS)]) == 0
    capsys.readouterr()
    assert main(["kb", "--kb", kb, "search", "allocate a VMEM scratch buffer for an accumulator", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["doc"].startswith("pallas/tpu/")


@pytest.mark.parametrize("argv", [["kb", "search", "--json"], ["kb", "--json", "search"], ["--json", "kb", "stats", "--bogus"],
                                  ["kb", "lessons", "--kind", "nope", "--json"]])
def test_json_usage_errors_of_kb_actions_are_json(argv, capsys):
    """A usage error below `mk kb` (a missing query, a bad choice) is one JSON object with a hint, exit 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out = capsys.readouterr().out
    err = json.loads(out)
    assert err["error"] == "UsageError" and err["reason"] and "--help" in err["hint"]
    if "search" in argv:
        assert "query" in err["reason"] and err["hint"] == "see `mk kb search --help`"
