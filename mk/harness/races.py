"""The TPU interpreter's race detector, with the same findings in far less time.

Pallas's TPU interpreter (``jax._src.pallas.mosaic.interpret``) checks every load, store and DMA of a kernel against
every earlier access to the same buffer: a pair is a race when neither access happened before the other (their
vector clocks are unordered) and their index ranges overlap. Upstream compares the clocks one pair at a time in
Python (``vector_clock.ordered``, four numpy reductions per pair), so a kernel with *n* accesses to a buffer costs
*n*\\ ^2 / 2 such calls: measured with py-spy on the upstream GQA flash-attention fixture, three quarters of the
judge's TPU-interpreter check time was spent there.

:class:`RaceState` keeps each buffer's clocks in one array and orders a new access against all earlier ones in a
few array operations; only the pairs whose clocks are unordered (none, in a kernel without races) have their ranges
compared, with upstream's own ``_ranges_overlap``. The verdict is the same: ``races_found`` is set exactly when
upstream's would be (``tests/test_races.py`` replays random access histories through both). :func:`install` puts it
in the interpreter only where the interpreter's race-detector interface is the one this was written against, and
otherwise leaves upstream's in place (slower, same answer).

It also models what a chip's memory holds where the kernel has not written (stop 33). Output blocks are double
buffered on a chip: when the block index changes, the next block is written in the other slot, which still holds the
block of two changes back. The pipeline's read of an output block to write it back (a read with no source line, of
a buffer not in HBM) is where a block ends: :meth:`RaceState._next_slot` then puts in the buffer what that slot holds
(the block of two changes back, or, the first time, fresh fill). And it records reads of memory never written:
:meth:`RaceState.track` is told of each buffer the interpreter allocates with one of mk's fills
(:mod:`mk.harness.poison`: scratch, output blocks, ``run_scoped`` buffers, an unaliased output in HBM); writes (the
kernel's stores, DMAs, the pipeline's copy of an input block) mark elements written; the first read by the kernel,
or by its DMA, of an element not yet written is kept in :attr:`RaceState.unwritten_read` (a flag in the verdict: an
honest kernel may read and discard, as upstream megablox's masked select on its output block does; a kernel whose
result depends on what it read disagrees with itself across the fills, and with the double-buffered slot).
A ``run_scoped`` buffer sits at one offset on a chip, so it starts with what the last buffer of the same line left
there (:meth:`RaceState.allocated`; the interpreter handed each a fresh fill: a kernel that left a marker there and
cheated when the next step found it passed, stop 33's red team).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: the parameters of upstream's check_read / check_write this class implements (anything else: not installed)
_SIGNATURE = ["self", "device_id", "local_core_id", "clock", "buffer_key", "rnge", "source_info"]


class _Log:
    """The accesses to one buffer of one kind (reads or writes): clocks in a growing array, ranges in a list."""

    __slots__ = ("clocks", "ranges", "who")

    def __init__(self, width: int) -> None:
        self.clocks = np.zeros((16, width), np.int64)
        self.ranges: list[Any] = []
        self.who: list[tuple[Any, Any, Any]] = []  # (device, core, source info): summarised only for a race

    def add(self, clock: np.ndarray, rnge: Any, who: tuple[Any, Any, Any]) -> None:
        n = len(self.ranges)
        if n == len(self.clocks):
            self.clocks = np.concatenate([self.clocks, np.zeros_like(self.clocks)])
        self.clocks[n] = clock
        self.ranges.append(rnge)
        self.who.append(who)

    def unordered(self, clock: np.ndarray, n: int) -> np.ndarray:
        """Indices among the first ``n`` whose clock neither happened before nor after ``clock`` (upstream's
        ``not vector_clock.ordered(theirs, clock)``)."""
        if n == 0:
            return np.empty(0, np.intp)
        theirs = self.clocks[:n]
        before = (theirs <= clock).all(axis=1) & (theirs < clock).any(axis=1)
        after = (theirs >= clock).all(axis=1) & (theirs > clock).any(axis=1)
        return np.flatnonzero(~(before | after))


class _Landed:
    """The DMA writes that landed in one buffer: each DMA's id, the ids given out by then (every DMA with a smaller
    id had started), and its range."""

    __slots__ = ("ids", "started", "ranges")

    def __init__(self) -> None:
        self.ids = np.zeros(16, np.int64)
        self.started = np.zeros(16, np.int64)
        self.ranges: list[Any] = []

    def add(self, dma: int, started: int, rnge: Any) -> None:
        n = len(self.ranges)
        if n == len(self.ids):
            self.ids, self.started = (np.concatenate([a, np.zeros_like(a)]) for a in (self.ids, self.started))
        self.ids[n], self.started[n] = dma, started
        self.ranges.append(rnge)

    def concurrent(self, dma: int) -> np.ndarray:
        """Indices of the writes that landed while DMA ``dma`` (landing now) was in flight."""
        n = len(self.ranges)
        return np.flatnonzero((self.ids[:n] != dma) & (dma < self.started[:n]))


class Findings:
    """What the race states of one run found, across every kernel of the program: the interpreter makes a new race
    state for each ``pallas_call`` (stop 33's second red team: a race in the first kernel of two was forgotten when
    the second began, and only the last kernel's findings were read)."""

    def __init__(self) -> None:
        self.races = False
        self.unwritten: str | None = None


_findings = Findings()


def start() -> Findings:
    """Begin a run: the findings of every race state made from now on (until the next start) go to a new record."""
    global _findings
    _findings = Findings()
    return _findings


def findings() -> Findings:
    """The record of the current run (:func:`start`)."""
    return _findings


class RaceState:
    """A drop-in for upstream's ``RaceDetectionState`` (the attributes and methods the interpreter uses)."""

    def __init__(self, num_cores: int) -> None:
        self.num_cores = num_cores
        self.lock = threading.Lock()
        self.races_found = False
        self.findings = _findings  # the run's record, shared by every kernel's race state
        self._reads: dict[Any, _Log] = {}
        self._writes: dict[Any, _Log] = {}
        self._unwritten: dict[Any, np.ndarray] = {}  # buffer key -> True where nothing has written yet
        self._slots: dict[Any, list[np.ndarray]] = {}  # output block buffer -> its last blocks (double buffering)
        self._sites: dict[Any, Any] = {}  # run_scoped buffer -> where it was allocated (its line, shape, memory)
        self._left: dict[Any, np.ndarray] = {}  # such a place -> what the last buffer there held when freed
        self._valid: dict[Any, tuple[int, ...]] = {}  # a padded input in HBM -> its shape before padding
        self._padding: dict[Any, np.ndarray | None] = {}  # (device, core) -> the padding of the block it copies in
        self._copies: dict[Any, list[np.ndarray]] = {}  # an input block buffer -> its last two blocks
        self._landed: dict[Any, _Landed] = {}  # buffer -> the DMA writes that landed in it
        #: the first read of memory never written, described (None: none)
        self.unwritten_read: str | None = None

    def track(self, key: Any, shape: tuple[int, ...]) -> None:
        """``key`` is a buffer of ``shape`` allocated with a fill: nothing in it has been written."""
        with self.lock:
            self._unwritten[key] = np.ones(shape, bool)

    def allocated(self, keys: list[Any], value: Any, source_info: Any) -> None:
        """The interpreter allocated ``keys`` (one buffer per core) with ``value``: tracked if ``value`` is a fill's
        (:func:`mk.harness.poison.is_fill`); a ``run_scoped`` buffer (one with a source line) starts with what the
        last buffer of its line left, as at one offset on a chip."""
        from mk.harness import poison

        fill = poison.is_fill(value)
        for key in keys:
            with _content(key) as (content, _):
                if content is None:
                    continue
                site = None
                if source_info is not None:
                    site = (key[0], key[2], key[3], content.shape, content.dtype.str, _frame(source_info))
                    left = self._left.get(site)
                    if left is not None:
                        content[...] = left
            if fill:
                self.track(key, tuple(content.shape))
            elif source_info is None and key[0] in ("any", "hbm"):  # an input (or an aliased output) in HBM
                valid = poison.valid_shape(content)  # only an input a fill padded: its padding is that fill
                if valid is not None and tuple(valid) != tuple(content.shape):
                    with self.lock:
                        self._valid[key] = tuple(valid)
            if site is not None:
                with self.lock:
                    self._sites[key] = site

    def freeing(self, key: Any) -> None:
        """The interpreter frees buffer ``key``: a ``run_scoped`` one leaves its content where it was."""
        with self.lock:
            site = self._sites.pop(key, None)
        if site is None:
            return
        with _content(key) as (content, _):
            if content is not None:
                self._left[site] = content.copy()

    def _accessed(self, key: Any, rnge: Any, source_info: Any, write: bool, core: Any = None) -> None:
        """The memory model's part of an access (the lock held): the pipeline's copy-in, write-back and input read
        drive the slots and padding; the kernel's writes mark elements written, its reads of unwritten ones are
        recorded."""
        if source_info is None and isinstance(key, tuple) and key:  # the pipeline
            if write and key[0] not in ("any", "hbm"):  # an input block copied in
                self._copied_in(key, core)
            elif not write and key[0] not in ("any", "hbm"):  # an output block read to be written back: it ends
                self._next_slot(key)
            elif not write and key in self._valid:  # a padded input's block read, to be copied in (by this core)
                self._padding[core] = _padding_of(tuple(rnge), self._valid[key])
            if not write:
                return
        mask = self._unwritten.get(key)
        if mask is None:
            return
        try:
            part = mask[tuple(rnge)]
        except (IndexError, TypeError, ValueError):  # out of bounds: the interpreter's own checks say so
            return
        if write:
            mask[tuple(rnge)] = False
        elif part.any() and self.unwritten_read is None:
            self.unwritten_read = (f"{int(part.sum())} of {part.size} elements read from {key[0]} buffer {key[1]} "
                                   f"[{_describe(rnge)}] at {_frame(source_info)} before anything wrote them")
            if self.findings.unwritten is None:
                self.findings.unwritten = self.unwritten_read
            log.info("read of memory never written in the TPU interpreter: %s", self.unwritten_read)

    def _dma_landed(self, dma: int, key: Any, rnge: Any, who: tuple[Any, Any, Any]) -> None:
        """DMA ``dma`` wrote ``rnge`` of ``key``: a race if another DMA into an overlapping range was in flight at
        the same time (one started before the other landed), whichever landed last: two copies into one window at
        once land in no promised order on a chip (stop 33's second red team: zeros then the result into one HBM
        window at a dynamic offset; the interpreter's clocks order two DMAs of one virtual device, so upstream's
        detector never reported it). Called with the lock held; the candidates are found with array operations
        (a kernel may issue thousands of copies into one buffer), their ranges compared one by one."""
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret
        from jax._src.pallas.mosaic.interpret.race_detection_state import _ranges_overlap

        counter = getattr(tpu_interpret, "dma_id_counter", None)
        started = int(getattr(counter, "value", dma + 1))
        landed = self._landed.get(key)
        if landed is None:
            landed = self._landed[key] = _Landed()
        for i in landed.concurrent(dma):
            if _ranges_overlap(rnge, landed.ranges[i]):
                log.warning("race in the TPU interpreter: DMAs %d and %d both in flight into %s[%s] (at %s)",
                            int(landed.ids[i]), dma, key, rnge, _frame(who[2]))
                self.races_found = True
                self.findings.races = True
                break
        landed.add(dma, started, rnge)

    def _copied_in(self, key: Any, core: Any) -> None:
        """The pipeline copied an input block into buffer ``key``: input blocks are double buffered on a chip and a
        partial block's padding is not copied, so its padding holds what the slot held, the block of two copies
        back (the fill the first time)."""
        padding = self._padding.pop(core, None)
        with _content(key) as (content, _):
            if content is None:
                return
            copies = self._copies.setdefault(key, [])
            if padding is not None and padding.shape == content.shape and len(copies) >= 2 and padding.any():
                content[padding] = copies[-2][padding]
            copies.append(content.copy())
            del copies[:-2]

    def _next_slot(self, key: Any) -> None:
        """The output block in buffer ``key`` ends (it is being written back): the buffer now holds what the other
        slot of a double-buffered output holds on a chip, the block of two changes back (fresh fill the first time),
        and nothing in it is written."""
        with _content(key) as (content, memory):
            if content is None:
                return
            blocks = self._slots.setdefault(key, [])
            blocks.append(content.copy())
            if len(blocks) >= 2:
                content[...] = blocks[-2]
            else:
                content[...] = _fresh(content.shape, content.dtype, memory.uninitialized_memory)
            del blocks[:-2]
        mask = self._unwritten.get(key)
        if mask is not None:
            mask[...] = True

    def _logs(self, key: Any, clock: np.ndarray) -> tuple[_Log, _Log]:
        width = len(clock)
        reads = self._reads.get(key)
        if reads is None:
            reads = self._reads[key] = _Log(width)
            self._writes[key] = _Log(width)
        return reads, self._writes[key]

    def _conflict(self, log_: _Log, n: int, clock: np.ndarray, rnge: Any) -> int | None:
        from jax._src.pallas.mosaic.interpret.race_detection_state import _ranges_overlap

        for i in log_.unordered(clock, n):
            if _ranges_overlap(rnge, log_.ranges[i]):
                return int(i)
        return None

    def _found(self, what: str, key: Any, rnge: Any, who: tuple[Any, Any, Any], other: str, log_: _Log, i: int) -> None:
        dev, core, info = log_.who[i]
        log.warning("race in the TPU interpreter: %s of %s[%s] by %s/%s at %s, against a %s of [%s] by %s/%s at %s",
                    what, key, rnge, who[0], who[1], _frame(who[2]), other, log_.ranges[i], dev, core, _frame(info))
        self.races_found = True
        self.findings.races = True

    def check_read(self, device_id: Any, local_core_id: Any, clock: Any, buffer_key: Any, rnge: Any,
                   source_info: Any = None) -> None:
        clock = np.asarray(clock)
        who = (device_id, local_core_id, source_info)
        with self.lock:
            reads, writes = self._logs(buffer_key, clock)
            n = len(writes.ranges)
            reads.add(clock, rnge, who)
            i = self._conflict(writes, n, clock, rnge)
            if i is not None:
                self._found("read", buffer_key, rnge, who, "write", writes, i)
            self._accessed(buffer_key, rnge, source_info, write=False, core=(device_id, local_core_id))

    def check_write(self, device_id: Any, local_core_id: Any, clock: Any, buffer_key: Any, rnge: Any,
                    source_info: Any = None) -> None:
        clock = np.asarray(clock)
        who = (device_id, local_core_id, source_info)
        with self.lock:
            reads, writes = self._logs(buffer_key, clock)
            n_writes, n_reads = len(writes.ranges), len(reads.ranges)
            writes.add(clock, rnge, who)
            for other, log_, n in (("write", writes, n_writes), ("read", reads, n_reads)):
                i = self._conflict(log_, n, clock, rnge)
                if i is not None:
                    self._found("write", buffer_key, rnge, who, other, log_, i)
            self._accessed(buffer_key, rnge, source_info, write=True, core=(device_id, local_core_id))
            if _is_dma(device_id):
                self._dma_landed(int(device_id), buffer_key, rnge, who)


@contextlib.contextmanager
def _content(key: Any) -> Iterator[tuple[np.ndarray | None, Any]]:
    """The array buffer ``key`` holds in the interpreter's shared memory, with that memory's lock held, and the
    memory; (None, ...) where no kernel is being interpreted or there is no such buffer."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret

    memory = getattr(tpu_interpret, "_shared_memory", None)
    if memory is None:
        yield None, None
        return
    with memory.lock:
        content = getattr(memory.mem.get(key), "content", None)
        yield (content if isinstance(content, np.ndarray) else None), memory


def _frame(source_info: Any) -> str:
    if source_info is None:
        return "pallas_call"
    from jax._src import source_info_util

    return source_info_util.summarize(source_info)


#: the first id the TPU interpreter gives a DMA (``dma_id_counter = Counter(100)``): a write reported with a source
#: "device" of at least this is a DMA's (``DMA.execute_write`` passes its id), below it a core's
FIRST_DMA_ID = 100


def _is_dma(device_id: Any) -> bool:
    try:
        return int(device_id) >= FIRST_DMA_ID
    except (TypeError, ValueError):
        return False


def _padding_of(rnge: tuple[Any, ...], valid: tuple[int, ...]) -> np.ndarray | None:
    """Which elements of the block ``rnge`` reads from a padded input of shape ``valid`` are padding (the block's
    shape: its squeezed dims dropped); None for a range this cannot read."""
    masks, outside = [], False
    for r, n in zip(rnge, valid):
        if isinstance(r, slice):
            if r.step not in (None, 1) or r.start is None or r.stop is None:
                return None
            masks.append(np.arange(r.start, r.stop) >= n)
        elif isinstance(r, (int, np.integer)):
            outside = outside or int(r) >= n
        else:
            return None
    if not masks:
        return None
    grid = np.zeros(tuple(len(m) for m in masks), bool) | outside
    for axis, m in enumerate(masks):
        grid |= m.reshape([-1 if a == axis else 1 for a in range(len(masks))])
    return grid


def _fresh(shape: tuple[int, ...], dtype: Any, fill: Any) -> np.ndarray:
    """Memory of ``shape`` as the run's fill leaves it (mk's fills: a fresh draw; upstream's: its one value)."""
    from mk.harness import poison

    if fill in poison.FILLS:
        return poison.array(tuple(shape), dtype, fill)
    from jax._src.pallas.mosaic.interpret import utils

    return np.full(shape, utils.get_uninitialized_value(dtype, fill), dtype)


def _describe(rnge: Any) -> str:
    parts = []
    for r in tuple(rnge):
        if isinstance(r, slice):
            parts.append(f"{r.start}:{r.stop}" + (f":{r.step}" if r.step not in (None, 1) else ""))
        else:
            parts.append(str(r))
    return ", ".join(parts) or "..."


def compatible(upstream: Any) -> bool:
    """Whether upstream's race-detector class has the interface :class:`RaceState` implements."""
    try:
        return all(list(inspect.signature(getattr(upstream, m)).parameters) == _SIGNATURE
                   for m in ("check_read", "check_write"))
    except (AttributeError, TypeError, ValueError):
        return False


def install() -> bool:
    """Make the TPU interpreter build a :class:`RaceState` for its next run, and tell it of the buffers it allocates
    and frees (idempotent); False, leaving upstream's detector in place, where its interface is not the one this
    implements."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interp
        from jax._src.pallas.mosaic.interpret import race_detection_state as upstream
    except ImportError:
        return False
    if interp.RaceDetectionState is not RaceState:
        if interp.RaceDetectionState is not upstream.RaceDetectionState or not compatible(upstream.RaceDetectionState):
            log.info("the TPU interpreter's race detector is not the one mk's faster detector was written for: kept as is")
            return False
        interp.RaceDetectionState = RaceState
    if not getattr(interp._allocate_buffer, "_mk_memory", False):
        _hook_buffers(interp)
    return True


def _hook_buffers(interp: Any) -> None:
    """Wrap the interpreter's ``_allocate_buffer`` and ``_deallocate_buffer`` (looked up by name when a kernel is
    interpreted) to tell the run's :class:`RaceState`."""
    upstream_allocate, upstream_free = interp._allocate_buffer, interp._deallocate_buffer

    def _allocate_buffer(token: Any, device_id: Any, local_core_id: Any, memory_space: Any, val: Any,
                         source_info: Any = None) -> Any:
        out = upstream_allocate(token, device_id, local_core_id, memory_space, val, source_info=source_info)
        state = getattr(interp, "races", None)
        if isinstance(state, RaceState):
            try:
                space = interp.TPU_MEMORY_SPACE_NAMES[int(memory_space)]
                cores = ((0,) if space in ("any", "hbm") else range(interp._get_shared_memory().num_cores_per_device)
                         if local_core_id is None else (int(local_core_id),))
                state.allocated([(space, int(out[1]), int(device_id), core) for core in cores], val, source_info)
            except Exception:  # noqa: BLE001 - a fault of the model, not the kernel's: the run goes on without it
                log.exception("the TPU interpreter's memory model failed on an allocation; that buffer is not modelled")
        return out

    def _deallocate_buffer(token: Any, device_id: Any, local_core_id: Any, memory_space: Any, buffer_id: Any,
                           source_info: Any = None) -> Any:
        state = getattr(interp, "races", None)
        if isinstance(state, RaceState):
            try:
                space = interp.TPU_MEMORY_SPACE_NAMES[int(memory_space)]
                core = 0 if space in ("any", "hbm") else int(local_core_id)
                state.freeing((space, int(buffer_id), int(device_id), core))
            except Exception:  # noqa: BLE001 - as above
                log.exception("the TPU interpreter's memory model failed on a free; that buffer is not modelled")
        return upstream_free(token, device_id, local_core_id, memory_space, buffer_id, source_info=source_info)

    _allocate_buffer._mk_memory = _deallocate_buffer._mk_memory = True  # type: ignore[attr-defined]
    interp._allocate_buffer, interp._deallocate_buffer = _allocate_buffer, _deallocate_buffer


def installed() -> list[tuple[Any, str]]:
    """(owner, name) of what :func:`install` put in place and the methods it runs (for the tracer's tripwire)."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interp

    return [(RaceState, name) for name in ("check_read", "check_write", "_conflict", "track", "allocated", "freeing",
                                           "_accessed", "_next_slot", "_copied_in", "_dma_landed")] + \
        [(_Log, "unordered"), (_Log, "add"), (_Landed, "add"), (_Landed, "concurrent"),
         (interp, "_allocate_buffer"), (interp, "_deallocate_buffer"),
         (sys.modules[__name__], "start"), (sys.modules[__name__], "findings")]
