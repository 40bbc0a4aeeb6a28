"""Retrieval quality machinery: code blocks kept whole and indented, target tagging and filtering,
error-text queries, retrieve() formatting, and the eval script's scoring on a tiny fixture corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import retrieval as ev
from mk.errors import KnowledgeError
from mk.retrievers import KnowledgeStore
from mk.retrievers.builtin import handbook_sections
from mk.retrievers.parse import parse_markdown, parse_notebook, parse_rst, prose_and_code, split_long
from mk.retrievers.query import split_query
from mk.retrievers.store import clip
from mk.retrievers.targets import check_target, passage_targets, query_platform

REPO = Path(__file__).resolve().parents[1]
KERNEL = "def kernel(x_ref, o_ref):\n    @pl.when(pl.program_id(0) == 0)\n    def _init():\n        o_ref[...] = jnp.zeros_like(o_ref)\n\n    o_ref[...] += x_ref[...]"


# ------------------------------------------------------------------ code blocks
def test_fenced_indented_rst_and_notebook_code_keep_indentation():
    md = parse_markdown(f"# Acc\n\nInit then add:\n\n```python\n{KERNEL}\n```\n", "a.md")
    ind = parse_markdown("# Acc\n\nInit then add:\n\n" + "\n".join("    " + x if x else "" for x in KERNEL.split("\n")) + "\n\nAfter.\n", "b.md")
    rst = parse_rst("Acc\n===\n\nInit then add:\n\n.. code-block:: python\n\n" + "\n".join("   " + x if x else "" for x in KERNEL.split("\n")) + "\n", "c.rst")
    nb = parse_notebook(json.dumps({"cells": [{"cell_type": "markdown", "source": "# Acc\nInit then add:"}, {"cell_type": "code", "source": KERNEL}]}), "d.ipynb")
    for secs in (md, ind, rst, nb):
        assert len(secs) == 1 and f"```python\n{KERNEL}\n```" in secs[0].text, secs[0].text
        prose, code = prose_and_code(secs[0].text)
        assert "Init then add" in prose and "o_ref" not in prose and code.strip() == KERNEL
    assert "After." in ind[0].text


def test_indented_list_continuation_is_not_code():
    secs = parse_markdown("# L\n\n- item one\n\n    continues the item\n", "l.md")
    assert "```" not in secs[0].text and "continues the item" in secs[0].text


def test_long_sections_are_not_cut_inside_code_blocks():
    block = "```python\n" + "\n\n".join(f"x{i} = {i}" for i in range(40)) + "\n```"
    text = "intro " * 300 + "\n\n" + block + "\n\n" + "outro " * 300
    chunks = split_long(text, 2000)
    assert any(block in c for c in chunks)  # the block fits: it stays whole
    for c in chunks:
        assert sum(line.startswith("```") for line in c.split("\n")) % 2 == 0
    huge = "```python\n" + "\n".join(f"    y{i} = {i}" for i in range(400)) + "\n```"
    pieces = split_long(huge, 1000)
    assert len(pieces) > 1 and all(p.startswith("```python\n") and p.endswith("\n```") for p in pieces)
    assert "\n    y399 = 399\n" in pieces[-1] + "\n"


def test_handbook_code_blocks_survive_with_indentation():
    secs = [s for s in handbook_sections() if s.doc == "knowledge/tpu-accumulators.md" and "_init" in s.text]
    assert secs and "\n        acc_ref[...] = jnp.zeros_like(acc_ref)\n" in secs[0].text
    assert "Accumulate in an f32 VMEM scratch buffer" in secs[0].text  # with its prose


# --------------------------------------------------------------------- targets
def test_passage_targets_by_path_then_by_words():
    assert passage_targets("pallas/tpu/details.rst", "x", "anything") == ["tpu"]
    assert passage_targets("jax.experimental.pallas.mosaic_gpu.copy_gmem_to_smem", "x", "") == ["gpu"]
    assert passage_targets("knowledge/gpu-triton.md", "x", "") == ["gpu"]
    assert passage_targets("guide.md", "Triton", "Set num_warps for the Triton backend on the GPU.") == ["gpu"]
    assert passage_targets("guide.md", "Memory", "VMEM scratch on TPU.") == ["tpu"]
    assert passage_targets("guide.md", "Both", "On GPU use Triton; on TPU use VMEM.") == []
    assert passage_targets("guide.md", "Grid", "The grid is a loop.") == []
    assert query_platform("block shape error on TPU") == "tpu" and query_platform("warps and TMA") == "gpu"
    assert query_platform("GPU versus TPU") is None and check_target("TPU") == "tpu" and check_target(None) is None
    with pytest.raises(KnowledgeError, match="unknown target"):
        check_target("npu")


@pytest.fixture
def mixed(tmp_path: Path) -> KnowledgeStore:
    root = tmp_path / "docs"
    (root / "tpu").mkdir(parents=True)
    (root / "gpu").mkdir()
    (root / "tpu" / "blocks.md").write_text("# Block shapes on TPU\n\nThe block shape must be divisible by 8 and 128 in VMEM.\n")
    (root / "gpu" / "triton.md").write_text(
        "# Block shapes with Triton\n\nThe block shape of every block must be a power of 2; block shape errors on GPU.\n\n"
        "## Warps\n\nnum_warps sets the warps per program.\n"
    )
    (root / "grid.md").write_text("# Grids\n\nA grid runs the kernel once per block index.\n")
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    kb.add(root)
    return kb


def test_target_filters_other_platform_unless_nothing_else(mixed):
    docs = [p.doc for p in mixed.search("block shape error", k=5)]
    assert "gpu/triton.md" in docs  # no target: everything matching
    tpu = mixed.search("block shape error", k=5, target="tpu")
    assert [p.doc for p in tpu][0] == "tpu/blocks.md" and "gpu/triton.md" not in [p.doc for p in tpu[:2]]
    assert all(p.doc != "gpu/triton.md" for p in mixed.search("block shape", k=2, target="tpu"))
    # nothing but GPU passages match: they still come back, rather than nothing
    assert [p.doc for p in mixed.search("num_warps", k=3, target="tpu")] == ["gpu/triton.md"]
    assert mixed.search("block shape", k=1, target="gpu")[0].doc == "gpu/triton.md"
    assert mixed.search("block shape", k=3, target="cpu")  # cpu filters nothing
    assert {p.doc: p.targets for p in mixed.search("block", k=5)} == {"tpu/blocks.md": ["tpu"], "gpu/triton.md": ["gpu"], "grid.md": []}
    with pytest.raises(KnowledgeError):
        mixed.search("block", target="fpga")


def test_retrieve_caps_passages_per_page_and_passes_target(mixed):
    out = mixed.retrieve("block shape warps grid", k=5, target="tpu")
    assert out.count("gpu/triton.md") <= 2 and out.index("tpu/blocks.md") < out.index("gpu/triton.md")
    text = "prose\n```python\n" + "\n".join(f"    line_{i} = {i}" for i in range(100)) + "\n```"
    cut = clip(text, 300)
    assert len(cut) < 330 and cut.endswith("```") and sum(x.startswith("```") for x in cut.split("\n")) == 2
    assert "\n    line_1 = 1\n" in cut


# ---------------------------------------------------------------- error queries
def test_traceback_query_keeps_message_and_sets_source_lines_apart():
    tb = ('Traceback (most recent call last):\n  File "/tmp/c/kernel.py", line 41, in matmul\n    return pl.pallas_call(kernel)(x)\n'
          '  File "/usr/lib/python3.11/site-packages/jax/_src/pallas/mosaic/lowering.py", line 640, in _check\n    raise ValueError(\n'
          "ValueError: block shape (16, 100) of vector<8x256xf32> needs 48.00M; see https://github.com/jax-ml/jax/issues at 0x7f3a")
    main, context = split_query(tb)
    assert main.startswith("ValueError: block shape") and "f32" in main
    for noise in ("16", "100", "48", "https", "0x7f3a", "lowering.py", "Traceback", "line 41"):
        assert noise not in main, noise
    assert "pl.pallas_call(kernel)(x)" in context and "raise ValueError(" in context
    assert split_query("how do I tile a matmul") == ("how do I tile a matmul", "")


# ------------------------------------------------------------------ eval script
def test_eval_scoring_math():
    r = ev.score("q", ["a.md", "b.md"], ["c.md", "a.md", "d.md", "e.md", "f.md", "b.md"])
    assert r.first_relevant_rank == 2 and r.recall_at_5 == 0.5 and r.hit_at_5
    miss = ev.score("q", ["z.md"], ["a.md"])
    assert miss.first_relevant_rank is None and not miss.hit_at_5
    s = ev.summarize([r, miss])
    assert s == {"n_queries": 2, "recall_at_5": 0.25, "hit_at_5": 0.5, "mrr": 0.25}
    assert ev.collapse(["a", "a", "b", "a", "c"]) == ["a", "b", "c"]
    chunks = ev.heading_chunks("# A\n\ntext\n\n```\n# not a heading\n```\n\n## B\n\nmore\n", ".md")
    assert len(chunks) == 2 and "# not a heading" in chunks[0]
    assert len(ev.heading_chunks("Title\n=====\n\nx\n\nPart\n----\n\ny\n", ".rst")) == 2


def test_eval_on_a_tiny_fixture_corpus(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "tpu").mkdir(parents=True)
    (corpus / "tpu" / "vmem.md").write_text("# VMEM scratch\n\nAllocate a VMEM scratch accumulator with pltpu.VMEM.\n")
    (corpus / "triton.md").write_text("# Triton\n\nSet num_warps and num_stages on the GPU Triton backend.\n")
    (corpus / "prof.rst").write_text("Profiling\n=========\n\nCapture a trace with the profiler.\n")
    queries = tmp_path / "q.json"
    queries.write_text(json.dumps({"queries": [
        {"q": "VMEM scratch accumulator", "relevant": ["tpu/vmem.md"], "target": "tpu"},
        {"q": "num_warps for Triton", "relevant": ["triton.md"]},
        {"q": "capture a profiler trace", "relevant": ["prof.rst"]},
    ]}))
    res = ev.evaluate(corpus, {"fixture": queries})
    systems = res["sets"]["fixture"]["systems"]
    assert set(systems) == {"mk", "mk-no-target", "naive"} and res["index"]["files"] == 3
    for m in systems.values():
        assert m["n_queries"] == 3 and m["mrr"] == 1.0 and m["hit_at_5"] == 1.0
    md = ev.to_markdown(res, "python -m evals.retrieval x")
    assert "| fixture | 3 | naive | 1.000 |" in md and "python -m evals.retrieval x" in md
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"queries": [{"q": "x", "relevant": ["nope.md"]}]}))
    with pytest.raises(SystemExit, match="missing"):
        ev.evaluate(corpus, {"bad": bad})


def test_heldout_sets_are_well_formed():
    for name in ("kb_queries_heldout.json", "kb_queries_heldout2.json"):
        spec = json.loads((REPO / "evals" / name).read_text())
        assert len(spec["queries"]) >= 30 and "note" in spec and "corrections" in spec
        assert all(q["relevant"] and q.get("target") in (None, "tpu", "gpu", "cpu") for q in spec["queries"])
    assert len(json.loads((REPO / "evals" / "kb_queries_heldout.json").read_text())["queries"]) >= 30
