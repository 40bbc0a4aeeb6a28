"""Retrieval quality of the knowledge store over a documentation folder.

Builds a fresh store (no built-in corpus) in a temporary folder from CORPUS
only, runs every query in ``evals/kb_queries.json`` and scores the ranking at
the page level (passages of the same page collapse to its best rank):

- recall@5: share of a query's relevant pages found in the top 5 pages, averaged
- hit@5: share of queries with at least one relevant page in the top 5
- MRR: mean reciprocal rank of the first relevant page (0 when not in the top 50 pages)

Usage::

    python -m evals.retrieval [CORPUS] [--queries evals/kb_queries.json] [--out evals/results]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mk.retrievers import KnowledgeStore

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "kb" / "jax-docs"
DEFAULT_QUERIES = REPO / "evals" / "kb_queries.json"
PASSAGES_FETCHED = 200  # passages fetched per query before collapsing to pages
MAX_PAGES = 50


@dataclass
class QueryResult:
    q: str
    relevant: list[str]
    top_pages: list[str]
    first_relevant_rank: int | None
    recall_at_5: float
    hit_at_5: bool


def rank_pages(store: KnowledgeStore, query: str) -> list[str]:
    pages: list[str] = []
    for p in store.search(query, k=PASSAGES_FETCHED):
        if p.doc not in pages:
            pages.append(p.doc)
        if len(pages) == MAX_PAGES:
            break
    return pages


def score(query: str, relevant: list[str], pages: list[str]) -> QueryResult:
    rel = set(relevant)
    ranks = [i + 1 for i, doc in enumerate(pages) if doc in rel]
    top5 = set(pages[:5]) & rel
    return QueryResult(
        q=query,
        relevant=relevant,
        top_pages=pages[:5],
        first_relevant_rank=ranks[0] if ranks else None,
        recall_at_5=len(top5) / len(rel),
        hit_at_5=bool(top5),
    )


def evaluate(corpus: Path, queries_file: Path) -> dict:
    spec = json.loads(queries_file.read_text(encoding="utf-8"))
    queries = spec["queries"]
    missing = sorted({d for q in queries for d in q["relevant"] if not (corpus / d).exists()})
    if missing:
        raise SystemExit(f"relevant pages missing from {corpus}: {missing}")
    with tempfile.TemporaryDirectory(prefix="mk-kb-eval-") as tmp:
        t0 = time.perf_counter()
        store = KnowledgeStore.open(tmp, builtin=False)
        report = store.add(corpus)
        build_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        results = [score(q["q"], q["relevant"], rank_pages(store, q["q"])) for q in queries]
        search_ms = 1000 * (time.perf_counter() - t1) / len(queries)
    n = len(results)
    return {
        "corpus": os.path.relpath(corpus, REPO),
        "queries_file": os.path.relpath(queries_file.resolve(), REPO),
        "n_queries": n,
        "recall_at_5": round(sum(r.recall_at_5 for r in results) / n, 4),
        "hit_at_5": round(sum(r.hit_at_5 for r in results) / n, 4),
        "mrr": round(sum(1 / r.first_relevant_rank for r in results if r.first_relevant_rank) / n, 4),
        "index": {"files": report.files, "passages": report.passages, "code_blocks_dropped": report.code_blocks_dropped, "build_s": round(build_s, 2)},
        "mean_search_ms": round(search_ms, 2),
        "results": [asdict(r) for r in results],
    }


def to_markdown(res: dict, command: str) -> str:
    lines = [
        "# Knowledge store retrieval quality",
        "",
        f"Command: `{command}`",
        "",
        f"Corpus: `{res['corpus']}` ({res['index']['files']} files, {res['index']['passages']} passages, "
        f"{res['index']['code_blocks_dropped']} kernel code blocks left out; built in {res['index']['build_s']} s). "
        f"{res['n_queries']} queries, page-level scoring, mean search time {res['mean_search_ms']} ms.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| recall@5 | {res['recall_at_5']:.3f} |",
        f"| hit@5 | {res['hit_at_5']:.3f} |",
        f"| MRR | {res['mrr']:.3f} |",
        "",
        "| query | first relevant rank | recall@5 | top page |",
        "|---|---|---|---|",
    ]
    for r in res["results"]:
        rank = r["first_relevant_rank"] or "-"
        top = r["top_pages"][0] if r["top_pages"] else "-"
        lines.append(f"| {r['q']} | {rank} | {r['recall_at_5']:.2f} | {top} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT_CORPUS), help="documentation folder (default ../shared/kb/jax-docs)")
    ap.add_argument("--queries", default=str(DEFAULT_QUERIES))
    ap.add_argument("--out", default=str(REPO / "evals" / "results"), help="folder for retrieval.json and retrieval.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    corpus = Path(args.corpus).resolve()
    if not corpus.is_dir():
        print(f"corpus folder {corpus} not found; pass the path to a docs folder", file=sys.stderr)
        return 2
    res = evaluate(corpus, Path(args.queries))
    command = "python -m evals.retrieval" + ("" if Path(args.corpus).resolve() == DEFAULT_CORPUS.resolve() else f" {args.corpus}")
    res["command"] = command
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "retrieval.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    (out / "retrieval.md").write_text(to_markdown(res, command), encoding="utf-8")
    print(f"recall@5 {res['recall_at_5']:.3f}  hit@5 {res['hit_at_5']:.3f}  MRR {res['mrr']:.3f}  ({res['n_queries']} queries) -> {out}/retrieval.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
