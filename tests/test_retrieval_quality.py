"""Retrieval quality machinery: code blocks kept whole and indented, target tagging and filtering,
error-text queries, query expansion into the docs' terms, the page field, the SparseCore prior,
retrieve() formatting, and the eval script's scoring on a tiny fixture corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import retrieval as ev
from mk.errors import KnowledgeError
from mk.retrievers import KnowledgeStore
from mk.retrievers import store as store_mod
from mk.retrievers.builtin import handbook_sections
from mk.retrievers.concepts import expansion
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


def test_traceback_keeps_library_stage_names_not_the_candidates():
    tb = ('Traceback (most recent call last):\n  File "/tmp/mk-cand/kernel.py", line 57, in gather_rows\n    out = f(idx, x)\n'
          '  File "/usr/local/lib/python3.11/site-packages/jax/_src/pallas/core.py", line 1096, in _convert_block_spec_to_block_mapping\n'
          "    raise TypeError(\nTypeError: <lambda>() takes 1 positional argument but 2 were given")
    main, context = split_query(tb)
    assert main.startswith("TypeError: <lambda>()") and "convert_block_spec_to_block_mapping" not in main
    assert "convert_block_spec_to_block_mapping" in context and "gather_rows" not in context


# ------------------------------------------------------------ query expansion
def test_expansion_maps_plain_words_and_errors_to_the_docs_terms():
    assert "accumulator" in expansion("keep a running sum across grid steps").split()
    assert {"VMEM", "SRAM"} <= set(expansion("what fits in fast on-chip memory").split())
    assert "XLA" in expansion("no kernel").split() and "XLA" not in expansion("the kernel").split()  # stop-word phrases as written
    assert "interpret" in expansion("debug my kernel on a laptop with no accelerator").split()
    assert "megacore" in expansion("use both cores of the chip").split()
    err = "TypeError: <lambda>() takes 1 positional argument but 2 were given convert_block_spec_to_block_mapping"
    assert "index_map" in expansion(err, is_error=True).split() and "index_map" not in expansion(err).split()
    assert "static_argnums" in expansion("ConcretizationTypeError: Abstract tracer value encountered", is_error=True).split()
    assert expansion("pallas_call BlockSpec") == ""  # API names need no expansion
    groups = expansion("random dropout noise")  # several triggers of one concept: its terms once
    assert groups.split().count("prng_seed") == 1


@pytest.fixture
def concept_kb(tmp_path: Path) -> KnowledgeStore:
    root = tmp_path / "docs"
    (root / "tpu").mkdir(parents=True)
    (root / "acc.md").write_text("# Accumulators\n\nInitialise the accumulator scratch buffer with pl.when(program_id == 0), then add to it.\n")
    (root / "prof.md").write_text("# Profiling\n\nCapture a trace with the profiler and open it in Perfetto.\n")
    (root / "tpu" / "details.md").write_text("# TPU memory\n\nVMEM holds the blocks of a TPU kernel; the TensorCore reads VMEM.\n")
    (root / "tpu" / "sparsecore.md").write_text("# SparseCore memory\n\nVMEM holds the blocks of a TPU kernel; each subcore reads VMEM.\n")
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    kb.add(root)
    return kb


def test_plain_words_find_the_page_through_the_expansion(concept_kb, monkeypatch):
    assert [p.doc for p in concept_kb.search("keep a running sum across iterations", k=3)][0] == "acc.md"
    assert [p.doc for p in concept_kb.search("measure where the time goes", k=3)][0] == "prof.md"
    monkeypatch.setattr(store_mod, "EXPAND_WEIGHT", 0.0)
    assert concept_kb.search("keep a running sum across iterations", k=3) == []  # no shared word without it


def test_sparsecore_pages_score_less_unless_named(concept_kb, monkeypatch):
    def scores(q):
        return {p.doc: p.score for p in concept_kb.search(q, k=4)}

    plain, named = scores("VMEM blocks of a TPU kernel"), scores("SparseCore VMEM blocks of a TPU kernel")
    monkeypatch.setattr(store_mod, "SPECIALIST_PRIOR", 1.0)
    plain1, named1 = scores("VMEM blocks of a TPU kernel"), scores("SparseCore VMEM blocks of a TPU kernel")
    assert plain["tpu/sparsecore.md"] == pytest.approx(0.7 * plain1["tpu/sparsecore.md"])
    assert plain["tpu/details.md"] == pytest.approx(plain1["tpu/details.md"])
    assert named == pytest.approx(named1)  # the query names the SparseCore: no prior
    assert max(plain, key=plain.get) == "tpu/details.md" and max(named, key=named.get) == "tpu/sparsecore.md"


def test_page_field_scores_whole_pages(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "pipe.md").write_text("# Pipelining\n\n## Double buffering\n\nTwo buffers per input: one buffer is filled while the other buffer is read.\n\n"
                                  "## Copies\n\nEach DMA copies the next block; the DMA engine runs beside compute.\n")
    (root / "other.md").write_text("# Other\n\nA note on setup. Buffers and a DMA are mentioned here once, among many other words about "
                                   "installation, versions, flags and logging.\n")
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    kb.add(root)
    kb._ready()
    assert (kb.kb_dir / kb.manifest.index_dir / "bm25-page").is_dir()
    page = kb._page_field("buffers DMA")
    docs = [p.doc for p in kb._passages]
    assert {float(page[i]) for i, d in enumerate(docs) if d == "pipe.md"} == {1.0}
    assert all(page[i] < 1.0 for i, d in enumerate(docs) if d == "other.md")

    def titles():
        return [p.title for p in kb.search("buffers DMA", k=3)]

    # the page about buffers and DMAs overall lifts its passage that names only one of them above a passing mention
    assert titles().index("Pipelining > Double buffering") < titles().index("Other")
    monkeypatch.setattr(store_mod, "PAGE_FIELD_WEIGHT", 0.0)
    assert titles().index("Pipelining > Double buffering") > titles().index("Other")


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


def test_heldout3_is_listed_only_when_it_exists():
    # the unseen set is never read here: only the registration rule is checked
    assert ev.HELDOUT3.name == "kb_queries_heldout3.json"
    assert ("heldout3" in ev.QUERY_SETS) == ev.HELDOUT3.exists()


def test_heldout_sets_are_well_formed():
    for name in ("kb_queries_heldout.json", "kb_queries_heldout2.json"):
        spec = json.loads((REPO / "evals" / name).read_text())
        assert len(spec["queries"]) >= 30 and "note" in spec and "corrections" in spec
        assert all(q["relevant"] and q.get("target") in (None, "tpu", "gpu", "cpu") for q in spec["queries"])
    assert len(json.loads((REPO / "evals" / "kb_queries_heldout.json").read_text())["queries"]) >= 30
