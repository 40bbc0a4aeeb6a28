"""The fast tier, from measured durations: which tests ``-m "not slow"`` leaves out.

A test is ``slow`` when its source says so (``pytest.mark.slow``) or when it is named in ``tests/slow_tests.txt``,
which this script writes from a measured run of the whole suite::

    python -m pytest -q -n auto --dist worksteal --junitxml=/tmp/full.xml
    python tests/tiers.py /tmp/full.xml [/tmp/earlier.xml | tests/slow_tests.txt ...] --threshold 2.0

Every test whose set-up, call and tear-down together took at least ``--threshold`` seconds in that run (the longest
of its times where several reports are given: a test slow in any of them stays slow) goes into the file (with the time it took and the run it came from, as comments). A test's first module-scoped fixture counts
against it, so a file's first test may be listed for its fixture. The conftest reads the file at collection
(:func:`slow_ids`); a name there that no longer exists marks nothing (rewrite the file after renaming slow tests).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LIST = TESTS / "slow_tests.txt"


def node_id(classname: str, name: str, root: Path = TESTS.parent) -> str:
    """The pytest node id of a JUnit ``testcase`` (``tests.kernels.test_x.TestY`` + ``test_z[a]``)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):  # the longest prefix that is a file; the rest are classes
        path = Path(*parts[:cut]).with_suffix(".py")
        if (root / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return "::".join([Path(*parts).with_suffix(".py").as_posix(), name])


def durations(junit: Path) -> dict[str, float]:
    """Seconds per test node id in a JUnit XML report (skipped tests included, at the time they took)."""
    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        out[node_id(case.get("classname", ""), case.get("name", ""))] = float(case.get("time") or 0.0)
    return out


def slow_ids(path: Path = LIST) -> set[str]:
    """The node ids listed in ``path`` (blank lines and ``#`` comments skipped; a missing file lists none)."""
    if not path.is_file():
        return set()
    return {line.split("#", 1)[0].strip() for line in path.read_text().splitlines()} - {""}


def write(times: dict[str, float], threshold: float, source: str, path: Path = LIST) -> tuple[int, float, float]:
    """Write the list; returns (tests listed, their seconds, the seconds left in the fast tier)."""
    slow = sorted((t, n) for n, t in times.items() if t >= threshold)
    lines = [f"# tests that took >= {threshold:g} s (set-up + call + tear-down) in: {source}",
             "# written by: python tests/tiers.py <junit.xml> --threshold T; read by tests/conftest.py (marks them slow)",
             "# node id  # seconds"]
    lines += [f"{n}  # {t:.1f}" for t, n in reversed(slow)]
    path.write_text("\n".join(lines) + "\n")
    listed = sum(t for t, _ in slow)
    return len(slow), listed, sum(times.values()) - listed


def listed_times(path: Path) -> dict[str, float]:
    """Seconds per node id as an earlier slow list recorded them (``node id  # seconds``)."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        node, _, seconds = line.rpartition("  # ")  # as write() puts it (a node id may hold a '#')
        if node.strip() and not line.startswith("#"):
            out[node.strip()] = float(seconds)
    return out


def longest(reports: list[Path]) -> dict[str, float]:
    """Seconds per test node id, the longest over several reports (a test missing from one counts as in the others);
    a report is a JUnit XML file or an earlier slow list (``.txt``, for runs whose reports are gone)."""
    out: dict[str, float] = {}
    for report in reports:
        for node, seconds in (listed_times(report) if report.suffix == ".txt" else durations(report)).items():
            out[node] = max(seconds, out.get(node, 0.0))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path, nargs="+", help="JUnit XML reports of whole-suite runs (pytest --junitxml), or an earlier slow list")
    ap.add_argument("--threshold", type=float, default=2.0, help="seconds at or above which a test is slow")
    ap.add_argument("--source", default="", help="what measured it (command, machine, commit), for the file's header")
    args = ap.parse_args(argv)
    times = longest(args.junit)
    n, listed, left = write(times, args.threshold, args.source or ", ".join(map(str, args.junit)))
    print(f"{len(times)} tests, {sum(times.values()):.0f} s; listed {n} ({listed:.0f} s); the rest {left:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
