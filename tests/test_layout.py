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


def test_the_measured_slow_list_names_tests_by_their_node_ids(tmp_path, request):
    import tiers

    junit = tmp_path / "r.xml"
    junit.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.test_layout" name="test_no_test_module_imports_another" time="0.4"/>'
                     '<testcase classname="tests.kernels.test_matmul" name="test_x[a-b]" time="7.5"/>'
                     '<testcase classname="tests.test_layout.TestK" name="test_m" time="2.0"/>'
                     '</testsuite></testsuites>')
    times = tiers.durations(junit)
    assert times == {"tests/test_layout.py::test_no_test_module_imports_another": 0.4,
                     "tests/kernels/test_matmul.py::test_x[a-b]": 7.5, "tests/test_layout.py::TestK::test_m": 2.0}
    listed = tmp_path / "slow.txt"
    n, slow, fast = tiers.write(times, 2.0, "a test", listed)
    assert (n, slow) == (2, 9.5) and abs(fast - 0.4) < 1e-9
    assert tiers.slow_ids(listed) == {"tests/kernels/test_matmul.py::test_x[a-b]", "tests/test_layout.py::TestK::test_m"}
    assert not tiers.slow_ids(tmp_path / "none.txt")
    # over several reports a test keeps its longest time (slow in one run, slow in the list)
    later = tmp_path / "later.xml"
    later.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.test_layout" name="test_no_test_module_imports_another" time="3.0"/>'
                     '<testcase classname="tests.kernels.test_matmul" name="test_x[a-b]" time="1.0"/>'
                     '</testsuite></testsuites>')
    assert tiers.longest([junit, later]) == {"tests/test_layout.py::test_no_test_module_imports_another": 3.0,
                                             "tests/kernels/test_matmul.py::test_x[a-b]": 7.5,
                                             "tests/test_layout.py::TestK::test_m": 2.0}
    # an earlier list counts as a report (the runs behind it may be gone)
    assert tiers.longest([later, listed]) == {"tests/test_layout.py::test_no_test_module_imports_another": 3.0,
                                              "tests/kernels/test_matmul.py::test_x[a-b]": 7.5,
                                              "tests/test_layout.py::TestK::test_m": 2.0}
    # the real list is in pytest's node-id form (as this test's own id), and every collected test it names is slow
    assert request.node.nodeid == "tests/test_layout.py::test_the_measured_slow_list_names_tests_by_their_node_ids"
    listed = tiers.slow_ids()
    for nodeid in listed:
        assert nodeid.startswith("tests/") and "::" in nodeid and (TESTS.parent / nodeid.split("::")[0]).is_file(), nodeid
    unmarked = [i.nodeid for i in request.session.items if i.nodeid in listed and i.get_closest_marker("slow") is None]
    assert not unmarked


def test_the_scripted_author_and_the_tiny_task_are_written_once():
    """Shared fakes live in tests/fakes.py: a module that needs a scripted author subclasses or configures its
    ScriptedAuthor, and the tanh2 task comes from ``tanh2_task``/``tanh2_module``, not a copy."""
    copies = []
    for path in TESTS.rglob("*.py"):
        if path.name in ("fakes.py", "test_layout.py"):
            continue
        text = path.read_text()
        try:
            tree = ast.parse(text)
        except (SyntaxError, RecursionError):  # an adversarial fixture made to break parsers
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.startswith("Scripted") and "Author" in node.name:
                if not any(ast.unparse(b) == "fakes.ScriptedAuthor" for b in node.bases):
                    copies.append(f"{path.name}: class {node.name}")
        if 'Task("tanh2"' in text or "Task('tanh2'" in text:
            copies.append(f"{path.name}: a tanh2 Task")
    assert not copies, copies
