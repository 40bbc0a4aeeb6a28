"""The order in which the TPU interpreter completes DMAs pending on one semaphore, varied between the check's runs.

With ``dma_execution_mode="on_wait"`` (the default) the TPU interpreter runs a pending DMA only when a core waits on
the semaphore it signals, and picks the one issued *last* (``Semaphore.wait``: ``tasks.pop()``). A chip completes
copies in no promised order (typically the first issued lands first). Two copies signalling one semaphore with the
same byte count cannot be told apart by a wait: a kernel that waits "for y", reads y's buffer, then waits "for x" is
right in the interpreter (y issued last, so y's copy runs first) and reads a buffer still in flight on a chip (round
12's red team, ``r12_rt_shared_sem_lifo_race``).

:func:`install` makes the pick depend on the run's fill (:mod:`mk.harness.poison`): the ``shuffled`` run's fill
completes the first issued, the ``garbage`` run's one at random (seeded with the fill), every other run as upstream
(last issued). A kernel whose result depends on which copy on a shared semaphore lands first then reads a buffer
not yet written (a race, or a read of memory never written) in one of the runs.
"""

from __future__ import annotations

import logging
from typing import Any

from mk.harness import poison

log = logging.getLogger(__name__)

#: which pending DMA a wait completes, per fill: "first" issued, "random"; anything else: upstream's (last issued)
ORDER = {poison.GARBAGE_SHUFFLED: "first", poison.GARBAGE: "random"}


class _Pending(list):
    """One core's pending DMAs on one semaphore: ``pop()`` picks as the run's :data:`ORDER` says."""

    def __init__(self, memory: Any) -> None:
        super().__init__()
        self._memory = memory

    def pop(self, index: Any = -1) -> Any:  # type: ignore[override]
        if index != -1 or len(self) < 2:
            return super().pop(index)
        order = ORDER.get(getattr(self._memory, "uninitialized_memory", None))
        if order == "first":
            return super().pop(0)
        if order == "random":
            return super().pop(poison.pick(len(self)))
        return super().pop()


def install() -> bool:
    """Make the TPU interpreter's semaphores keep pending DMAs in :class:`_Pending` lists (idempotent); False where
    ``Semaphore`` is not the class this was written against (upstream's order is kept)."""
    try:
        from jax._src.pallas.mosaic.interpret import shared_memory
    except ImportError:
        return False
    semaphore = getattr(shared_memory, "Semaphore", None)
    init = getattr(semaphore, "__init__", None)
    if init is None:
        return False
    if getattr(init, "_mk_dma_order", False):
        return True

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        tasks = getattr(self, "tasks", None)
        if isinstance(tasks, list) and all(isinstance(t, list) and not t for t in tasks):
            self.tasks = [_Pending(getattr(self, "shared_memory", None)) for _ in tasks]
        else:
            log.info("the TPU interpreter's semaphores keep pending DMAs differently: upstream's order kept")

    __init__._mk_dma_order = True  # type: ignore[attr-defined]
    semaphore.__init__ = __init__
    return True


def installed() -> list[tuple[Any, str]]:
    """(owner, name) of what :func:`install` put in place (for the tracer's tripwire)."""
    from jax._src.pallas.mosaic.interpret import shared_memory

    return [(shared_memory.Semaphore, "__init__"), (_Pending, "pop")]

