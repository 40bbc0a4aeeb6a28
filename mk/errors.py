"""One error hierarchy for mk.

Every error mk raises on purpose derives from :class:`MkError`. Each carries a
message that says what went wrong *and what to do*, plus keyword metadata
(``path``, ``hint`` ...) that callers and the CLI can show or serialise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class MkError(Exception):
    """Root of mk's errors. ``str(err)`` is a sentence a person can act on."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None, **metadata: Any):
        self.message = message
        self.hint = hint
        self.metadata = metadata
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, Any]:
        meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.metadata.items()}
        return {"error": type(self).__name__, "message": self.message, "hint": self.hint, **meta}


class TaskError(MkError):
    """A task could not be loaded or is malformed. ``path`` names the file."""

    def __init__(self, message: str, *, path: str | Path | None = None, **kw: Any):
        self.path = Path(path) if path is not None else None
        prefix = f"{self.path}: " if self.path is not None else ""
        super().__init__(prefix + message, path=self.path, **kw)


class CandidateError(MkError):
    """A candidate file cannot be used (missing, unreadable, no ``kernel``)."""


class TargetError(MkError):
    """An unknown target or an operation the target cannot do here."""


class StoreError(MkError):
    """The DuckDB store could not be opened, migrated or written."""


class StoreLocked(StoreError):
    """The store file is held by another (writing) process; ``path`` names it."""


class ConfigError(MkError):
    """mk is not configured for what was asked (no model, bad option ...)."""


class BudgetExceeded(MkError):
    """A run's budget (LM calls, cost, wall time) is spent."""


class ModelFailed(MkError):
    """The language model kept failing (rate limit, server error, timeout, transport) after its retries before the
    run had anything to keep; the run is recorded ``failed`` and can be resumed once the provider answers."""

    exit_code = 1


class KnowledgeError(MkError):
    """The knowledge store could not be built, loaded or searched."""


class AgentOutputError(MkError):
    """A sub-agent's answer failed validation on every try (``agent``, ``attempts``, ``errors``)."""


class EnvelopeError(MkError, ValueError):
    """Inputs or static values outside what a kernel was verified on (its envelope)."""


class ArgumentError(ConfigError, TypeError):
    """Arguments that ``mk.optimize``, or the function it returned, cannot take (also a ``TypeError``, as
    Python raises for a bad call)."""


class FallbackWarning(UserWarning):
    """An optimised function ran the reference instead of the kernel; the message says why."""
