"""Which sub-agent and which search node the LM calls made in this context belong to (context variables).

Each sub-agent's ``forward`` sets its name with :func:`agent_scope`, a search worker its node with
:func:`node_scope`; the LM accounting (:mod:`mk.lm`) and the Gemini engine (:mod:`mk.gemini`, per-agent settings)
read them. A leaf module: it imports only the standard library.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

_AGENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("mk_lm_agent", default=None)
_NODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("mk_lm_node", default=None)


@contextlib.contextmanager
def agent_scope(name: str) -> Iterator[None]:
    """Attribute the LM calls made inside the block to sub-agent ``name``."""
    token = _AGENT.set(name)
    try:
        yield
    finally:
        _AGENT.reset(token)


@contextlib.contextmanager
def node_scope(node_id: str | None) -> Iterator[None]:
    """Attribute the LM calls made inside the block to search node ``node_id`` (None: keep the enclosing one)."""
    if node_id is None:
        yield
        return
    token = _NODE.set(node_id)
    try:
        yield
    finally:
        _NODE.reset(token)


def current_agent() -> str | None:
    return _AGENT.get()


def current_node() -> str | None:
    return _NODE.get()
