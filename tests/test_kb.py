"""Knowledge store: parsing, ranking, persistence, rebuild on change, kernel code kept, DSPy tool."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mk.errors import KnowledgeError
from mk.retrievers import KnowledgeStore, Passage, default_kb_dir, make_search_tool, retrieve
from mk.retrievers.parse import is_kernel_code, parse_markdown, parse_notebook, parse_rst
from mk.retrievers.tokenize import tokenize

JAX_DOCS = Path(__file__).resolve().parents[2] / "shared" / "kb" / "jax-docs"

KERNEL_BLOCK = """```python
def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]
```"""


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "tpu").mkdir(parents=True)
    (root / "tpu" / "memory.md").write_text(
        "---\ntitle: x\n---\n# TPU memory\n\nIntro to memories.\n\n"
        "## VMEM scratch buffers\n\nAllocate a VMEM scratch buffer with `pltpu.VMEM((8, 128), jnp.float32)` "
        "in scratch_shapes to hold an accumulator across grid steps.\n\n" + KERNEL_BLOCK + "\n\n"
        "## HBM\n\nHigh bandwidth memory holds the inputs.\n"
    )
    (root / "gpu.rst").write_text(
        "GPU notes\n=========\n\nTriton backend overview.\n\nWarps\n-----\n\n"
        "Set num_warps in the compiler params.\n\n.. code-block:: python\n\n   params = CompilerParams(num_warps=4)\n"
    )
    nb = {"cells": [{"cell_type": "markdown", "source": ["# Profiling\n", "Capture a trace with the profiler.\n"]},
                    {"cell_type": "code", "source": "jax.profiler.trace('/tmp/t')", "outputs": []}]}
    (root / "prof.ipynb").write_text(json.dumps(nb))
    (root / "kernel.py").write_text("def my_kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "skip.md").write_text("# Hidden\n\nvmem vmem vmem\n")
    return root


def test_tokenizer_splits_identifiers_and_stems():
    toks = tokenize("pltpu.VMEM pallas_call BlockSpec buffers tiling")
    assert {"pltpu.vmem", "vmem", "pltpu", "pallas_call", "pallas", "call", "blockspec", "block", "spec"} <= set(toks)
    assert tokenize("buffer") == tokenize("buffers") and tokenize("pipelining") == tokenize("pipeline")
    assert "the" not in tokenize("the of and")


def test_markdown_sections_keep_title_chain_and_skip_fenced_headings():
    text = "# Top\n\nintro\n\n## Sub\n\n```python\n# not a heading\nx = 1\n```\n\n### Leaf\n\nbody\n"
    secs = parse_markdown(text, "a.md")
    assert [s.title for s in secs] == ["Top", "Top > Sub", "Top > Sub > Leaf"]
    assert secs[2].anchor == "leaf" and "# not a heading" in secs[1].text


def test_rst_and_notebook_sections():
    secs = parse_rst("Title\n=====\n\nHello :func:`foo <bar>`.\n\nPart\n----\n\nText::\n\n   code()\n", "x.rst")
    assert [s.title for s in secs] == ["Title", "Title > Part"]
    assert "Hello foo." in secs[0].text and "code()" in secs[1].text
    nb = json.dumps({"cells": [{"cell_type": "markdown", "source": "# NB\ntext"}, {"cell_type": "code", "source": "pl.pallas_call(k)"}]})
    sec = parse_notebook(nb, "n.ipynb")[0]
    assert sec.code_blocks_dropped == 0 and "```python\npl.pallas_call(k)\n```" in sec.text  # kernel code is kept


def test_kernel_code_detection():
    assert is_kernel_code("def matmul_kernel(x_ref, y_ref, o_ref):\n  pass")
    assert is_kernel_code("out = pl.pallas_call(kernel, out_shape=s)(x)")
    assert not is_kernel_code("pltpu.CompilerParams(dimension_semantics=('parallel',))")


def test_add_search_ranks_and_keeps_kernel_code(docs, tmp_path):
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    report = kb.add(docs)
    assert report.files == 3 and report.code_blocks_dropped == 0 and not report.failed  # .py and hidden skipped
    hits = kb.search("allocate a VMEM scratch buffer for an accumulator", k=3)
    assert isinstance(hits[0], Passage)
    assert (hits[0].doc, hits[0].anchor) == ("tpu/memory.md", "vmem-scratch-buffers")
    assert hits[0].title == "TPU memory > VMEM scratch buffers" and hits[0].source == str(docs.resolve())
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True) and hits[0].score > 0
    code_hit = kb.search("add_kernel o_ref", k=1)[0]  # kernel code stays with its section's prose, indented
    assert code_hit.anchor == "vmem-scratch-buffers" and "\n    o_ref[...] = x_ref[...] + y_ref[...]\n" in code_hit.text
    assert kb.search("num_warps", k=1)[0].doc == "gpu.rst"
    assert kb.search("profiler trace", k=1)[0].doc == "prof.ipynb"
    assert kb.search("zzzunknownword") == []
    with pytest.raises(KnowledgeError):
        kb.search("x", k=0)


def test_include_code_adds_python_files(docs, tmp_path):
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    report = kb.add(docs, include_code=True)
    assert report.files == 4 and report.code_blocks_dropped == 0
    docs_hit = {p.doc for p in kb.search("add_kernel my_kernel", k=5)}
    assert {"tpu/memory.md", "kernel.py"} <= docs_hit


def test_persistence_and_rebuild_on_change(docs, tmp_path):
    kb_dir = tmp_path / "kb"
    KnowledgeStore.open(kb_dir, builtin=False).add(docs)
    again = KnowledgeStore.open(kb_dir)
    assert again.stale_reason() is None and again.stats().passages > 0
    index_before = again.manifest.index_dir
    assert again.search("num_warps", k=1)[0].doc == "gpu.rst"
    assert again.manifest.index_dir == index_before  # loaded, not rebuilt

    (docs / "new.md").write_text("# Semaphores\n\nDMA semaphores signal copy completion.\n")
    fresh = KnowledgeStore.open(kb_dir)
    assert "added or removed" in fresh.stale_reason()
    assert fresh.search("DMA semaphores", k=1)[0].doc == "new.md"

    target = docs / "gpu.rst"
    assert fresh.search("zephyrquux", k=5) == []
    target.write_text(target.read_text().replace("compiler params", "zephyrquux"))
    os.utime(target, ns=(1, 1))
    fresh2 = KnowledgeStore.open(kb_dir)
    assert "changed" in fresh2.stale_reason()
    assert fresh2.search("zephyrquux", k=1)[0].doc == "gpu.rst"
    assert len(list(kb_dir.glob("index-*"))) == 1  # old index folders removed


def test_add_missing_path_is_a_typed_error(tmp_path):
    with pytest.raises(KnowledgeError, match="no such file"):
        KnowledgeStore.open(tmp_path / "kb", builtin=False).add(tmp_path / "nope")


def test_default_kb_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MK_DB", str(tmp_path / "db" / "mk.duckdb"))
    assert default_kb_dir() == tmp_path / "db" / "kb"
    monkeypatch.setenv("MK_KB_DIR", str(tmp_path / "elsewhere"))
    assert default_kb_dir() == tmp_path / "elsewhere"


@pytest.fixture(scope="session")
def builtin_kb(tmp_path_factory) -> Path:
    """The built-in corpus (JAX docstrings + handbook), built once per test session."""
    kb_dir = tmp_path_factory.mktemp("builtin-kb")
    KnowledgeStore.open(kb_dir).rebuild()
    return kb_dir


def test_builtin_corpus_has_docstrings_and_handbook(builtin_kb, tmp_path):
    kb_dir = tmp_path / "kb"
    shutil.copytree(builtin_kb, kb_dir)
    kb = KnowledgeStore.open(kb_dir)
    stats = kb.stats()
    assert stats.builtin and stats.sources["jax-docstrings"] > 100 and stats.sources["handbook"] > 20
    top = kb.search("pltpu.make_async_copy", k=1)[0]
    assert top.doc == "jax.experimental.pallas.tpu.make_async_copy" and top.source == "jax-docstrings"
    assert kb.search("scoped VMEM limit exceeded", k=1)[0].doc.startswith("knowledge/")
    assert kb.search("lax.dot_general preferred_element_type", k=3)[0].doc.startswith("jax.lax.")


def test_dspy_tool_and_retrieve(builtin_kb, tmp_path):
    import dspy

    kb_dir = tmp_path / "kb"
    shutil.copytree(builtin_kb, kb_dir)
    kb = KnowledgeStore.open(kb_dir)
    fn = make_search_tool(kb)
    tool = dspy.Tool(fn)
    assert tool.name == "search_kernel_docs" and "query" in tool.args and "knowledge base" in tool.desc
    out = tool(query="(8, 128) block shape tiling", k=2)
    assert out.startswith("[1] ") and "[2] " in out and "[3] " not in out
    assert "knowledge/" in retrieve("VMEM budget of a kernel", k=3, store=kb)


@pytest.mark.skipif(not JAX_DOCS.is_dir(), reason=f"{JAX_DOCS} (the JAX docs test corpus) is not present")
def test_vmem_scratch_query_over_jax_docs_returns_pallas_tpu_page(tmp_path):
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    kb.add(JAX_DOCS)
    top = kb.search("allocate a VMEM scratch buffer for an accumulator", k=1)[0]
    assert top.doc.startswith("pallas/tpu/"), top


@pytest.mark.skipif(not JAX_DOCS.is_dir(), reason=f"{JAX_DOCS} (the JAX docs test corpus) is not present")
def test_plain_words_reach_the_docs_page_through_its_own_terms(tmp_path):
    kb = KnowledgeStore.open(tmp_path / "kb", builtin=False)
    kb.add(JAX_DOCS)
    # no word of the docs' "Reductions and accumulation" section but "sum": the expansion brings it in
    titles = [p.title for p in kb.search("keep a running sum across grid steps", k=5)]
    assert any(t.endswith("Reductions and accumulation") for t in titles), titles
    assert kb.search("measure where the time goes in my program", k=1)[0].doc == "profiling.md"
