"""The run service: where a run is created, its suite frozen, its best kernel decided and its end recorded.

* :mod:`mk.run.config` — :class:`RunConfig`, the typed record of how a run was started (stored with it);
* :mod:`mk.run.service` — :class:`Run`: create or reopen a run, freeze its suite, finish / interrupt / fail it;
* :mod:`mk.run.best` — :func:`best_of`, the one rule for "the best kernel";
* :mod:`mk.run.stop` — :func:`budget_stop_reason`, the one stop reason for a spent budget (every mode);
* :mod:`mk.run.output` — the kernel file (provenance header, envelope guard) and the JSON report every mode writes;
* :mod:`mk.run.restore` — a run's outcome and snapshots rebuilt from its trajectory or its stored rows.

The loops that drive a run in its mode are above this package (:mod:`mk.programs.modes`); nothing here imports them.

Auto, search, HITL, bench and ``mk resume`` go through these; none of them creates a run row itself.
"""

from mk.run.best import best_of
from mk.run.config import RunConfig
from mk.run.service import Outcome, Run

__all__ = ["Outcome", "Run", "RunConfig", "best_of"]
