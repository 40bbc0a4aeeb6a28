"""The knowledge store as a DSPy tool and as a pre-retrieval step for prompts."""

from __future__ import annotations

from typing import Callable

from mk.retrievers.store import KnowledgeStore


def make_search_tool(store: KnowledgeStore | None = None, *, k: int = 5, max_chars: int = 1200, target: str | None = None) -> Callable[..., str]:
    """A function a DSPy agent can call (wrap it in ``dspy.Tool`` or pass it to ``dspy.ReAct``).

    The returned function's name, signature and docstring are what the LM sees.
    ``target`` ("tpu", "gpu", "cpu") is the platform the agent writes for; it is
    fixed here by the caller, not left to the LM (see :meth:`KnowledgeStore.search`).
    """
    kb = store or KnowledgeStore.open()

    def search_kernel_docs(query: str, k: int = k) -> str:
        """Search the kernel-writing knowledge base: Pallas (TPU and GPU) and jax.lax API docs plus
        the mk handbook (TPU memory and VMEM budgets, (8,128) tiling, MXU use, DMA and pipelining,
        Triton and Mosaic GPU notes, profiling, common Mosaic compiler errors and fixes).

        Args:
            query: what you want to know, in words or API names, e.g. "VMEM scratch accumulator
                pltpu.VMEM" or "block shape not divisible by 8 128 error".
            k: how many passages to return (1-10).

        Returns:
            The best matching passages, numbered, each with its title and document reference.
        """
        return kb.retrieve(query, max(1, min(int(k), 10)), max_chars=max_chars, target=target)

    return search_kernel_docs


def retrieve(query: str, k: int = 5, store: KnowledgeStore | None = None, target: str | None = None) -> str:
    """Passages for ``query`` formatted for a prompt (the pre-retrieval step of a sub-agent)."""
    return (store or KnowledgeStore.open()).retrieve(query, k, target=target)
