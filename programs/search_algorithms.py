"""Search algorithms: small frontier classes in one registry.

A search runs level by level (:class:`mk.programs.search.Search`); an algorithm only says which nodes the next
level has. ``first(cfg)`` gives level 1 (children of the reference); ``next(cfg, level, done, depth)`` gives the
level ``depth`` from the nodes of the previous level and every node done so far. Both must be deterministic
functions of the configuration and the completed nodes, so a resumed search asks for exactly the nodes it lost.

Adding an algorithm: a class here with ``name`` and those two methods, and one line in :data:`ALGORITHMS`
(the CLI's ``--algorithm`` choices and the config check read the registry).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Spec:
    """One node to run: its key, its parent's (None: a child of the reference), its level and branch."""

    key: str
    parent_key: str | None
    depth: int
    branch: int
    siblings: int
    #: a second parent (evolutionary crossover): its code and lineage reach the author too
    mate_key: str | None = None
    #: what the algorithm asks of this node, added to the author's branch hint
    note: str = ""


def _alive(nodes: Sequence[Any]) -> list[Any]:
    return sorted((n for n in nodes if n.expandable), key=lambda n: n.key)


def _rank(nodes: Sequence[Any]) -> list[Any]:
    """Correct before not, then fastest first (unmeasured correct nodes after measured ones), then by key."""
    return sorted(nodes, key=lambda n: (n.status != "correct", -(n.speedup if n.speedup is not None else 0.0), n.key))


class Parallel:
    """``width`` independent trajectories; each node continues its own chain for ``depth`` levels."""

    name = "parallel"
    summary = "width independent chains, depth levels each"

    def first(self, cfg: Any) -> list[Spec]:
        return [Spec(f"n{i}", None, 1, i, cfg.width) for i in range(cfg.width)]

    def next(self, cfg: Any, level: Sequence[Any], done: Mapping[str, Any], depth: int) -> list[Spec]:
        return [Spec(f"{n.key}.0", n.key, depth, 0, 1) for n in _alive(level)]


class Beam:
    """Level 1 is ``branches`` children of the reference; each later level expands the ``width`` best nodes of
    the previous one into ``branches`` children."""

    name = "beam"
    summary = "expand the width best nodes of each level into branches children"

    def width(self, cfg: Any) -> int:
        return cfg.width

    def first(self, cfg: Any) -> list[Spec]:
        return [Spec(f"n{i}", None, 1, i, cfg.branches) for i in range(cfg.branches)]

    def next(self, cfg: Any, level: Sequence[Any], done: Mapping[str, Any], depth: int) -> list[Spec]:
        kept = _rank(_alive(level))[: self.width(cfg)]
        return [Spec(f"{n.key}.{i}", n.key, depth, i, cfg.branches) for n in sorted(kept, key=lambda n: n.key)
                for i in range(cfg.branches)]


class Greedy(Beam):
    """Beam search of width 1: always expand the single best node."""

    name = "greedy"
    summary = "beam of width 1"

    def width(self, cfg: Any) -> int:
        return 1


def niche(node: Any) -> tuple[str, str]:
    """The niche a kernel lives in: its strategy (the plan that made it) and its block-size regime (the product of
    its tuned integer config values: small < 2^14 <= medium < 2^17 <= large; ``default`` when untuned)."""
    ints = [v for v in (node.config or {}).values() if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if not ints:
        regime = "default"
    else:
        size = math.prod(ints)
        regime = "small" if size < 2 ** 14 else "medium" if size < 2 ** 17 else "large"
    return (node.plan or (node.plans[0] if node.plans else node.key), regime)


class Evolve:
    """Evolutionary search (the MaxKernel paper's stated next step).

    Generation 1 is ``width`` children of the reference. Afterwards the population is every correct kernel found
    so far, and only the fastest one per :func:`niche` is kept (the elites). Each generation has
    ``width * branches`` children: mutations of parents chosen by a tournament on measured speed (the author
    rewrites the parent's kernel changing one choice), and, when two niches exist, one crossover of the two best
    elites of different niches (the author sees both kernels and combines them). The tournament draws from a
    generator seeded by the generation number, so a resumed search asks for the same children."""

    name = "evolve"
    summary = "a population of the fastest kernel per niche; mutation and crossover children"

    def first(self, cfg: Any) -> list[Spec]:
        return [Spec(f"n{i}", None, 1, i, cfg.width, note="seed the population: a kernel unlike the siblings'")
                for i in range(cfg.width)]

    def next(self, cfg: Any, level: Sequence[Any], done: Mapping[str, Any], depth: int) -> list[Spec]:
        everyone = _alive(list(done.values()))
        correct = [n for n in everyone if n.status == "correct"]
        elites: dict[tuple[str, str], Any] = {}
        for n in _rank(correct):
            elites.setdefault(niche(n), n)
        population = _rank(list(elites.values())) or _rank(everyone)[: cfg.width]
        if not population:
            return []
        count = max(1, cfg.width * cfg.branches)
        rng = random.Random(f"evolve-{depth}")
        specs: list[Spec] = []
        if len(elites) >= 2 and count >= 2:
            a, b = population[0], next(n for n in population[1:] if niche(n) != niche(population[0]))
            specs.append(Spec(f"{a.key}.g{depth}x", a.key, depth, 0, count, mate_key=b.key,
                              note=f"crossover: combine this kernel's strategy ({niche(a)[0]}) with node {b.key}'s "
                                   f"({niche(b)[0]}) into one kernel"))
        while len(specs) < count:
            i = len(specs)
            parent = min(rng.sample(population, min(2, len(population))), key=population.index)  # tournament of two
            specs.append(Spec(f"{parent.key}.g{depth}m{i}", parent.key, depth, i, count,
                              note="mutation: rewrite the parent's kernel changing one choice (block sizes, grid order, "
                                   "fusion, accumulation) and keep the rest"))
        return specs


#: the registry: ``--algorithm NAME``
ALGORITHMS: dict[str, Any] = {a.name: a for a in (Beam(), Parallel(), Greedy(), Evolve())}


def get_algorithm(name: str) -> Any:
    from mk.errors import ConfigError

    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError(f"unknown search algorithm {name!r}", hint=f"choose one of {', '.join(ALGORITHMS)}") from None
