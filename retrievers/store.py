"""The knowledge store: a persisted bm25s index over documentation sections.

Layout of ``kb_dir``::

    manifest.json            what was indexed (sources, file stamps, JAX version), written last, atomically
    builtin-<key>.jsonl      cached sections of the built-in corpus for that JAX version + handbook
    index-<id>/bm25/         the bm25s index
    index-<id>/passages.jsonl  passages in index order

The index is rebuilt when a recorded source file changes (size/mtime, then
sha256), when files appear or vanish, when JAX or the handbook changes, or
when the tokenizer changes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from mk.errors import KnowledgeError
from mk.retrievers import builtin
from mk.retrievers.models import FileStamp, IngestReport, KBStats, Manifest, Passage, SourceRecord
from mk.retrievers.parse import CODE_SUFFIXES, DOC_SUFFIXES, Section, parse_file
from mk.retrievers.tokenize import TOKENIZER_VERSION, tokenize

log = logging.getLogger(__name__)

PARSER_VERSION = "1"
_SKIP_DIRS = {"__pycache__", "node_modules", "_build", "site-packages"}
_INDEX_SUFFIXES = tuple(s for s in DOC_SUFFIXES if s != ".txt")


def default_kb_dir() -> Path:
    """``$MK_KB_DIR``, else ``kb/`` beside the DB (``$MK_DB``, else ``$MK_HOME`` or ``~/.mk``)."""
    if os.environ.get("MK_KB_DIR"):
        return Path(os.environ["MK_KB_DIR"]).expanduser()
    if os.environ.get("MK_DB"):
        return Path(os.environ["MK_DB"]).expanduser().parent / "kb"
    return Path(os.environ.get("MK_HOME") or Path.home() / ".mk").expanduser() / "kb"


def _stamp(path: Path) -> FileStamp:
    st = path.stat()
    return FileStamp(mtime_ns=st.st_mtime_ns, size=st.st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def _source_files(root: Path, include_code: bool) -> dict[str, Path]:
    """Indexable files under ``root`` keyed by path relative to it (a file maps to its name)."""
    suffixes = _INDEX_SUFFIXES + (CODE_SUFFIXES if include_code else ())
    if root.is_file():
        return {root.name: root}
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") or part in _SKIP_DIRS for part in rel.parts):
            continue
        if p.is_file() and p.suffix.lower() in suffixes:
            out[rel.as_posix()] = p
    return out


def _index_tokens(s: Section) -> list[str]:
    # Titles count three times (chain once, the leaf twice more), the doc path once, then the text.
    doc_words = s.doc.rsplit(".", 1)[0] if "/" in s.doc else s.doc
    leaf = s.titles[-1] if s.titles else ""
    return tokenize(s.title) + tokenize(leaf) * 2 + tokenize(doc_words) + tokenize(s.text)


class KnowledgeStore:
    """Search documentation by BM25 over sections. Open with :meth:`open`."""

    def __init__(self, kb_dir: Path, manifest: Manifest):
        self.kb_dir = kb_dir
        self.manifest = manifest
        self._bm25 = None
        self._passages: list[Passage] | None = None
        self._loaded_index: str | None = None
        self._checked = False

    # ------------------------------------------------------------------ open
    @classmethod
    def open(cls, kb_dir: str | Path | None = None, *, builtin: bool | None = None) -> "KnowledgeStore":
        """Open (or create) the store in ``kb_dir`` (default :func:`default_kb_dir`).

        ``builtin`` chooses whether the JAX docstrings and handbook are indexed;
        ``None`` keeps what the store was built with (``True`` for a new store).
        Nothing is built until the first search, stats or add.
        """
        kb = Path(kb_dir).expanduser() if kb_dir is not None else default_kb_dir()
        mpath = kb / "manifest.json"
        manifest = Manifest()
        if mpath.exists():
            try:
                manifest = Manifest.model_validate_json(mpath.read_text(encoding="utf-8"))
            except ValueError as err:
                log.warning("knowledge store: unreadable manifest %s (%s); it will be rebuilt", mpath, err)
                manifest = Manifest()
        if builtin is not None and builtin != manifest.builtin:
            manifest = manifest.model_copy(update={"builtin": builtin, "index_dir": None})
        return cls(kb, manifest)

    # ------------------------------------------------------------ ingestion
    def add(self, path: str | Path, include_code: bool = False) -> IngestReport:
        """Record a file or folder of md/rst/ipynb (and .py with ``include_code``) and rebuild."""
        root = Path(path).expanduser().resolve()
        if not root.exists():
            raise KnowledgeError(f"cannot add {root}: no such file or folder", hint="pass a folder of .md/.rst/.ipynb files")
        if root.is_file() and root.suffix.lower() not in _INDEX_SUFFIXES + CODE_SUFFIXES:
            raise KnowledgeError(f"cannot add {root}: not a .md/.rst/.ipynb file", hint="add the folder that holds your docs")
        sources = [s for s in self.manifest.sources if s.path != str(root)]
        sources.append(SourceRecord(path=str(root), include_code=include_code))
        self.manifest = self.manifest.model_copy(update={"sources": sources})
        reports = self._build()
        return reports[str(root)]

    def rebuild(self) -> KBStats:
        """Re-read every source and rebuild the index now."""
        self._build()
        return self.stats()

    def stale_reason(self) -> str | None:
        """Why the persisted index no longer matches its sources, or ``None`` if it does."""
        m = self.manifest
        if not m.index_dir or not (self.kb_dir / m.index_dir / "passages.jsonl").exists():
            return "not built yet"
        if m.tokenizer != f"{TOKENIZER_VERSION}.{PARSER_VERSION}":
            return "tokenizer changed"
        if m.builtin and m.builtin_key != builtin.builtin_key():
            return "JAX version or handbook changed"
        for src in m.sources:
            root = Path(src.path)
            if not root.exists():
                return f"source {src.path} is gone"
            files = _source_files(root, src.include_code)
            if set(files) != set(src.files):
                return f"files added or removed under {src.path}"
            for rel, p in files.items():
                old, st = src.files[rel], p.stat()
                if (st.st_mtime_ns, st.st_size) != (old.mtime_ns, old.size) and _stamp(p).sha256 != old.sha256:
                    return f"{p} changed"
        return None

    def _builtin_sections(self) -> tuple[str, list[Section]]:
        key = builtin.builtin_key()
        cache = self.kb_dir / f"builtin-{key}-p{PARSER_VERSION}.jsonl"
        if cache.exists():
            try:
                rows = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines() if line]
                return key, [Section(**r) for r in rows]
            except (ValueError, TypeError) as err:
                log.warning("knowledge store: ignoring unreadable cache %s (%s)", cache, err)
        sections = builtin.docstring_sections() + builtin.handbook_sections()
        for old in self.kb_dir.glob("builtin-*.jsonl"):
            old.unlink(missing_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(s.__dict__) + "\n" for s in sections), encoding="utf-8")
        os.replace(tmp, cache)
        return key, sections

    def _build(self) -> dict[str, IngestReport]:
        try:
            self.kb_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise KnowledgeError(f"cannot create the knowledge store folder {self.kb_dir}: {err}", hint="set MK_KB_DIR or --kb to a writable folder") from err
        passages: list[Passage] = []
        tokens: list[list[str]] = []

        def put(sections: list[Section], source: str) -> None:
            for s in sections:
                passages.append(Passage(doc=s.doc, title=s.title, text=s.text, source=source, anchor=s.anchor))
                tokens.append(_index_tokens(s))

        key = None
        if self.manifest.builtin:
            key, sections = self._builtin_sections()
            for s in sections:
                put([s], builtin.HANDBOOK_SOURCE if s.doc.startswith("knowledge/") else builtin.DOCSTRING_SOURCE)
        reports: dict[str, IngestReport] = {}
        records = []
        for src in self.manifest.sources:
            root = Path(src.path)
            files = _source_files(root, src.include_code) if root.exists() else {}
            if not root.exists():
                log.warning("knowledge store: source %s no longer exists; its passages are dropped", root)
            stamps, failed, n_pass, n_drop = {}, [], 0, 0
            for rel, p in files.items():
                try:
                    sections = parse_file(p, rel, src.include_code)
                except (OSError, ValueError) as err:
                    log.warning("knowledge store: skipping %s (%s)", p, err)
                    failed.append(rel)
                    continue
                stamps[rel] = _stamp(p)
                put(sections, src.path)
                n_pass += len(sections)
                n_drop += sum(s.code_blocks_dropped for s in sections)
            records.append(src.model_copy(update={"files": stamps}))
            reports[src.path] = IngestReport(path=src.path, files=len(stamps), passages=n_pass, code_blocks_dropped=n_drop, failed=failed)
        self._write(passages, tokens, records, key)
        return reports

    def _write(self, passages: list[Passage], tokens: list[list[str]], records: list[SourceRecord], key: str | None) -> None:
        import bm25s

        index_id = f"index-{uuid.uuid4().hex[:12]}"
        out = self.kb_dir / index_id
        out.mkdir()
        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs each build at DEBUG through its own handler
        if passages:
            bm25 = bm25s.BM25()
            bm25.index(tokens, show_progress=False)
            bm25.save(str(out / "bm25"), show_progress=False)
        with open(out / "passages.jsonl", "w", encoding="utf-8") as fh:
            for p in passages:
                fh.write(p.model_dump_json(exclude={"score"}) + "\n")
        old = self.manifest.index_dir
        self.manifest = self.manifest.model_copy(
            update={
                "tokenizer": f"{TOKENIZER_VERSION}.{PARSER_VERSION}",
                "builtin_key": key,
                "sources": records,
                "index_dir": index_id,
                "passages": len(passages),
                "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
        )
        tmp = self.kb_dir / f"manifest.{uuid.uuid4().hex[:8]}.tmp"
        tmp.write_text(self.manifest.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, self.kb_dir / "manifest.json")
        if old and old != index_id:
            shutil.rmtree(self.kb_dir / old, ignore_errors=True)
        self._checked = True
        log.info("knowledge store: indexed %d passages into %s", len(passages), out)

    # --------------------------------------------------------------- search
    def _ready(self) -> None:
        if not self._checked:
            reason = self.stale_reason()
            if reason:
                log.info("knowledge store: rebuilding (%s)", reason)
                self._build()
            self._checked = True
        if self._loaded_index == self.manifest.index_dir:
            return
        import bm25s

        out = self.kb_dir / str(self.manifest.index_dir)
        try:
            lines = (out / "passages.jsonl").read_text(encoding="utf-8").splitlines()
            self._passages = [Passage.model_validate_json(line) for line in lines if line]
            self._bm25 = bm25s.BM25.load(str(out / "bm25"), show_progress=False) if self._passages else None
        except (OSError, ValueError) as err:
            raise KnowledgeError(f"the knowledge store index in {out} is unreadable: {err}", hint="run `mk kb rebuild`") from err
        self._loaded_index = self.manifest.index_dir

    def search(self, query: str, k: int = 5) -> list[Passage]:
        """The ``k`` best passages for ``query``, best first (only passages sharing a term)."""
        if k < 1:
            raise KnowledgeError(f"k must be at least 1, got {k}")
        self._ready()
        if self._bm25 is None or not self._passages:
            return []
        ids = sorted({self._bm25.vocab_dict[t] for t in tokenize(query) if t in self._bm25.vocab_dict})
        if not ids:
            return []
        scores = np.asarray(self._bm25.get_scores(ids))
        top = np.argsort(-scores, kind="stable")[:k]
        return [self._passages[i].model_copy(update={"score": float(scores[i])}) for i in top if scores[i] > 0]

    def retrieve(self, query: str, k: int = 5, max_chars: int = 1200) -> str:
        """The top passages formatted for a prompt (numbered, with their reference)."""
        hits = self.search(query, k)
        if not hits:
            return f"(no passages in the knowledge store match {query!r})"
        blocks = []
        for n, p in enumerate(hits, 1):
            text = p.text if len(p.text) <= max_chars else p.text[:max_chars].rstrip() + " …"
            blocks.append(f"[{n}] {p.title} ({p.ref})\n{text}")
        return "\n\n".join(blocks)

    def stats(self) -> KBStats:
        self._ready()
        per_source: dict[str, int] = {}
        for p in self._passages or []:
            per_source[p.source] = per_source.get(p.source, 0) + 1
        return KBStats(
            kb_dir=str(self.kb_dir),
            passages=len(self._passages or []),
            documents=len({(p.source, p.doc) for p in self._passages or []}),
            builtin=self.manifest.builtin,
            sources=per_source,
            built_at=self.manifest.built_at,
        )
