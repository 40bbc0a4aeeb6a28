"""The offline author seen through Auto's Author interface."""

from __future__ import annotations

from typing import Any

from mk.author import OfflineAuthor
from mk.author.proposal import Proposal
from mk.contracts import Author, Plan
from mk.profile import ProfileReport


class OfflineAuthorAdapter(Author):
    """Plans are the applicable templates in order; it cannot repair a compile error.

    A plan edited by a person (HITL) is honoured when it names one of this task's proposals (that proposal is
    implemented instead); free text it cannot follow is refused with the names it can."""

    spec = "offline"

    def __init__(self, author: OfflineAuthor | None = None):
        self._author = author or OfflineAuthor()
        self.name = self._author.name
        self._queue: list[Proposal] | None = None
        self._all: list[Proposal] = []
        self.declined: dict[str, str] = {}

    def plan(self, ctx: Any) -> Any:
        if self._queue is None:
            authored = self._author.propose(ctx.task, ctx.target)
            self._queue = list(authored.proposals)
            self._all = list(authored.proposals)
            self.declined = authored.declined
        if not self._queue:
            return None
        nxt = self._queue.pop(0)
        return Plan(nxt.name, nxt.rationale, nxt)

    def implement(self, ctx: Any, plan: Any) -> Proposal:
        proposal = plan.data
        if not isinstance(proposal, Proposal) or plan.text.strip() == proposal.rationale.strip():
            return proposal
        # an edited plan: follow it when it names one of the proposals (the longest name that appears wins)
        named = sorted((p for p in self._all if p.name in plan.text), key=lambda p: -len(p.name))
        if named:
            return named[0]
        from mk.errors import ConfigError

        names = ", ".join(p.name for p in self._all) or "none for this task"
        raise ConfigError("the offline author cannot follow a free-text plan: it writes only its own kernels",
                          hint=f"name one of them in the plan ({names}), edit the code instead, or use an LM author (--lm)")

    def fix(self, ctx: Any, proposal: Proposal, error: str) -> Proposal | None:
        return None

    def analyse(self, ctx: Any, report: ProfileReport) -> str:
        if not report.measured:
            return ""
        return f"{report.bound or 'unknown'}-bound; " + (
            f"{report.roofline_fraction:.0%} of the roofline" if report.roofline_fraction is not None else "no roofline fraction")
