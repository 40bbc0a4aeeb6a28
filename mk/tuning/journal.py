"""An Optuna journal backend over the mk DuckDB store.

Optuna's :class:`~optuna.storages.JournalStorage` keeps a study as an
append-only log of operations and rebuilds its state by replaying it; the
backend only has to append logs and read them back from a log number
(``BaseJournalBackend.read_logs`` / ``append_logs``). This backend keeps the
log in the ``optuna_journal`` table of the mk store (columns ``journal``,
``log_number``, ``log``), one row per operation, numbered from 0 without gaps
per journal name. Several studies can share one journal; several journals can
share one file.

Process safety: the DuckDB file has one writing process (see :mod:`mk.store`),
so the backend is safe across the threads of that process (an append is one
transaction under the store's lock) and other processes cannot open the file
at the same time. A study interrupted by a crash keeps every operation that
was appended before it; trials that were running are left ``RUNNING`` in the
log: call :func:`fail_interrupted_trials` before resuming so that they are
marked ``FAIL`` and do not count as live.

Example::

    with Store.open() as store:
        study = optuna.create_study(study_name="mm-tiles", storage=journal_storage(store, "run-1"),
                                    load_if_exists=True)
        fail_interrupted_trials(study)
        study.optimize(objective, n_trials=20)
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Iterable

import optuna
from optuna.storages.journal import BaseJournalBackend, JournalStorage
from optuna.trial import TrialState

from mk.errors import StoreError
from mk.store import Store

log = logging.getLogger(__name__)


class DuckDBJournalBackend(BaseJournalBackend):
    """Optuna journal logs in the ``optuna_journal`` table of an mk store.

    ``store_or_path`` is an open :class:`~mk.store.Store` (shared, not closed by
    the backend) or a path for :meth:`Store.open` (opened and owned).
    """

    def __init__(self, store_or_path: Store | str | os.PathLike[str] | None, journal: str = "default"):
        if not journal:
            raise StoreError("an Optuna journal needs a non-empty name", hint="pass journal='...'")
        if isinstance(store_or_path, Store):
            self._store, self._owns = store_or_path, False
        else:
            self._store, self._owns = Store.open(store_or_path), True
        if self._store.read_only:
            log.debug("journal %r opened on a read-only store: appends will fail", journal)
        self.journal = journal

    @property
    def store(self) -> Store:
        return self._store

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        rows = self._store.query(
            "SELECT log FROM optuna_journal WHERE journal = ? AND log_number >= ? ORDER BY log_number",
            [self.journal, int(log_number_from)],
        )
        return [json.loads(r["log"]) for r in rows]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if not logs:
            return
        with self._store.transaction() as store:
            start = store.query(
                "SELECT coalesce(max(log_number) + 1, 0) AS n FROM optuna_journal WHERE journal = ?",
                [self.journal],
            )[0]["n"]
            store.executemany(
                "INSERT INTO optuna_journal VALUES (?, ?, ?)",
                # NaN/Infinity stay as Python's json writes them; the column is text.
                [[self.journal, int(start) + i, json.dumps(entry, separators=(",", ":"))] for i, entry in enumerate(logs)],
            )

    def close(self) -> None:
        """Close the store if this backend opened it."""
        if self._owns:
            self._store.close()

    def __getstate__(self) -> dict[str, Any]:
        # A pickled backend (Optuna pickles storages for some parallel modes)
        # re-opens the file by path in the receiving process.
        return {"path": str(self._store.path), "journal": self.journal}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["journal"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"DuckDBJournalBackend({str(self._store.path)!r}, journal={self.journal!r})"


def journal_storage(store: Store | str | os.PathLike[str] | None, name: str = "default") -> JournalStorage:
    """An Optuna storage whose journal ``name`` lives in the mk store."""
    return JournalStorage(DuckDBJournalBackend(store, name))


def fail_interrupted_trials(study: optuna.Study) -> list[int]:
    """Mark the study's ``RUNNING`` trials ``FAIL``; returns their numbers.

    Call this when resuming, before ``optimize``: with one writing process per
    store, a trial still ``RUNNING`` in the journal belongs to a process that
    died (unless this same process is optimizing the study in another thread).
    """
    numbers = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_system_attr(trial._trial_id, "mk:interrupted", True)
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        numbers.append(trial.number)
    if numbers:
        log.info("study %s: marked interrupted trials %s as FAIL", study.study_name, numbers)
    return numbers
