"""The test suite's own shape: no test module imports another (shared pieces live in support modules), and every
test module has a mechanism marker (tests/conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import MECHANISM, mechanism

TESTS = Path(__file__).resolve().parent


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_test_module_imports_another():
    offenders = {p.relative_to(TESTS).as_posix(): sorted(m for m in _imported(p) if m.rsplit(".", 1)[-1].startswith("test_"))
                 for p in TESTS.rglob("test_*.py")}
    assert not {k: v for k, v in offenders.items() if v}, "move the shared piece into a support module"


def test_every_module_the_mechanism_table_names_exists():
    for prefixes in MECHANISM.values():
        for p in prefixes:
            assert (TESTS / p).exists(), f"tests/conftest.py names {p}, which does not exist"
    assert mechanism(TESTS / "kernels" / "test_matmul.py") == "kernels" and mechanism(Path(__file__)) == "unit"
