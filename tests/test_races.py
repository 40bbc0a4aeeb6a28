"""mk's race detector for the TPU interpreter (mk/harness/races.py) finds exactly what upstream's finds.

Random access histories (cores whose vector clocks advance and sometimes synchronise, DMAs with clocks of their
own, reads, writes and swaps of overlapping and disjoint ranges of a few buffers) are replayed through both
detectors, and after every access both must agree on whether a race has been found.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from mk.harness import races

upstream = pytest.importorskip("jax._src.pallas.mosaic.interpret.race_detection_state")


def _range(rng: random.Random) -> tuple:
    """A range like the interpreter's: per dimension an int, a slice with known bounds, or slice(None)."""
    dims = []
    for _ in range(rng.choice([1, 2])):
        kind = rng.random()
        if kind < 0.2:
            dims.append(rng.randrange(8))
        elif kind < 0.35:
            dims.append(slice(None))
        else:
            start = rng.randrange(8)
            dims.append(slice(start, start + rng.randrange(0, 4), rng.choice([None, 1])))
    return tuple(dims)


def _history(seed: int, cores: int, steps: int) -> list[tuple]:
    """Seeds 0, 3, 6, ...: one agent (every access ordered: race-free); the others: agents that synchronise often
    (seed % 3 == 1) or rarely."""
    rng = random.Random(seed)
    width = 2 * cores
    clocks = [np.zeros(width, np.int32) for _ in range(width)]  # cores, then DMA-like agents
    agents = 1 if seed % 3 == 0 else width
    sync = 0.9 if seed % 3 == 1 else 0.3
    events = []
    for _ in range(steps):
        who = rng.randrange(agents)
        clocks[who][who] += 1
        if rng.random() < sync:  # a semaphore / barrier: who learns what another agent has done
            other = rng.randrange(width)
            clocks[who][:] = np.maximum(clocks[who], clocks[other])
        op = rng.choice(["read", "write", "write", "read"])
        key = ("vmem", rng.randrange(3), 0, 0)
        events.append((op, who, clocks[who].copy(), key, _range(rng)))
    return events


@pytest.mark.parametrize("seed", range(40))
def test_same_findings_as_upstream_after_every_access(seed, capsys):
    cores = 1 + seed % 2
    theirs, ours = upstream.RaceDetectionState(num_cores=cores), races.RaceState(num_cores=cores)
    found = []
    for op, who, clock, key, rnge in _history(seed, cores, 60 + 5 * seed):
        for state in (theirs, ours):
            getattr(state, f"check_{op}")(0, who, clock, key, rnge)
        assert ours.races_found == theirs.races_found, (seed, op, who, clock, key, rnge)
        found.append(ours.races_found)
    capsys.readouterr()  # upstream prints each race it finds
    assert found  # histories with and without races are both covered across the seeds (checked below)


def test_the_histories_cover_races_and_race_free_runs():
    outcomes = set()
    for seed in range(40):
        state = upstream.RaceDetectionState(num_cores=1)
        for op, who, clock, key, rnge in _history(seed, 1 + seed % 2, 60 + 5 * seed):
            getattr(state, f"check_{op}")(0, who, clock, key, rnge)
        outcomes.add(state.races_found)
    assert outcomes == {True, False}


def test_ordered_accesses_never_race_and_the_same_range_unordered_does():
    state = races.RaceState(num_cores=1)
    state.check_write(0, 0, np.array([1, 0]), "b", (slice(0, 4),))
    state.check_read(0, 0, np.array([2, 0]), "b", (slice(0, 4),))  # after the write: ordered
    assert not state.races_found
    state.check_write(0, 1, np.array([0, 1]), "b", (slice(4, 8),))  # concurrent, disjoint range
    assert not state.races_found
    state.check_write(0, 1, np.array([0, 2]), "b", (slice(2, 3),))  # concurrent with both, overlapping
    assert state.races_found


def test_installed_only_over_the_interface_it_implements():
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interp

    assert races.compatible(upstream.RaceDetectionState)

    class Other:
        def check_read(self, clock, key):  # another interface: not ours to replace
            pass

        check_write = check_read

    assert not races.compatible(Other)
    saved = interp.RaceDetectionState
    try:
        interp.RaceDetectionState = Other
        assert races.install() is False and interp.RaceDetectionState is Other
        interp.RaceDetectionState = upstream.RaceDetectionState
        assert races.install() is True and interp.RaceDetectionState is races.RaceState
        assert races.install() is True  # idempotent
    finally:
        interp.RaceDetectionState = saved
