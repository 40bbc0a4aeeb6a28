"""Typed values of the knowledge store: passages, the manifest, reports."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Passage(BaseModel):
    """One searchable section of a document."""

    doc: str = Field(description="document path relative to its source root, or a qualified API name")
    title: str = Field(description="heading chain, outermost first, joined by ' > '")
    text: str
    score: float = 0.0
    source: str = Field(description="'jax-docstrings', 'handbook', or the folder a user added")
    anchor: str = ""
    targets: list[str] = Field(default_factory=list, description="platforms the passage is specific to ('tpu', 'gpu'); empty: any")

    @property
    def ref(self) -> str:
        return f"{self.doc}#{self.anchor}" if self.anchor else self.doc


class FileStamp(BaseModel):
    mtime_ns: int
    size: int
    sha256: str


class SourceRecord(BaseModel):
    """A file or folder added with ``mk kb add``; re-read on every rebuild."""

    path: str
    include_code: bool = False
    files: dict[str, FileStamp] = Field(default_factory=dict)


class Manifest(BaseModel):
    schema_version: int = 1
    tokenizer: str = ""
    builtin: bool = True
    builtin_key: str | None = None
    sources: list[SourceRecord] = Field(default_factory=list)
    index_dir: str | None = None
    passages: int = 0
    built_at: str | None = None


class IngestReport(BaseModel):
    path: str
    files: int
    passages: int
    code_blocks_dropped: int
    failed: list[str] = Field(default_factory=list)


class KBStats(BaseModel):
    kb_dir: str
    passages: int
    documents: int
    builtin: bool
    sources: dict[str, int] = Field(description="passages per source")
    built_at: str | None
