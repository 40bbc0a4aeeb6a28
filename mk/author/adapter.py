"""The offline author seen through Auto's Author interface."""

from __future__ import annotations

from typing import Any

from mk.author import OfflineAuthor
from mk.author.proposal import Proposal
from mk.profile import ProfileReport


class OfflineAuthorAdapter:
    """Plans are the applicable templates in order; it cannot repair a compile error."""

    def __init__(self, author: OfflineAuthor | None = None):
        self._author = author or OfflineAuthor()
        self.name = self._author.name
        self._queue: list[Proposal] | None = None
        self.declined: dict[str, str] = {}

    def plan(self, ctx: Any) -> Any:
        from mk.programs.auto import Plan

        if self._queue is None:
            authored = self._author.propose(ctx.task, ctx.target)
            self._queue = list(authored.proposals)
            self.declined = authored.declined
        if not self._queue:
            return None
        nxt = self._queue.pop(0)
        return Plan(nxt.name, nxt.rationale, nxt)

    def implement(self, ctx: Any, plan: Any) -> Proposal:
        return plan.data

    def fix(self, ctx: Any, proposal: Proposal, error: str) -> Proposal | None:
        return None

    def analyse(self, ctx: Any, report: ProfileReport) -> str:
        if not report.measured:
            return ""
        return f"{report.bound or 'unknown'}-bound; " + (
            f"{report.roofline_fraction:.0%} of the roofline" if report.roofline_fraction is not None else "no roofline fraction")
