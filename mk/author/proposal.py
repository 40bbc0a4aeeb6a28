"""What an author proposes: candidate source plus why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Proposal:
    name: str
    source: str
    rationale: str
    template: str
