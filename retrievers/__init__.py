"""mk.retrievers: the knowledge store (bm25s over documentation sections) and its DSPy tool."""

from mk.retrievers.models import IngestReport, KBStats, Passage
from mk.retrievers.store import KnowledgeStore, default_kb_dir
from mk.retrievers.tool import make_search_tool, retrieve

__all__ = ["IngestReport", "KBStats", "KnowledgeStore", "Passage", "default_kb_dir", "make_search_tool", "retrieve"]
