"""Every built-in jaxbench task: loads, matches the published facts' interface, runs at ci scale,
and exports to a self-contained MaxKernel task dir."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

from mk.errors import TaskError
from mk.suite import export_maxkernel, list_builtin, load_builtin, suite_dir
from mk.task import np_dtype

FACTS = {t["id"]: t for t in json.loads((Path(__file__).parent / "data" / "jaxbench_facts.json").read_text())["tasks"]}
IDS = [i.split(":", 1)[1] for i in list_builtin("jaxbench")]


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


def test_suite_lists_every_published_task_in_order():
    assert IDS == sorted(FACTS, key=lambda i: int(i.split("_", 1)[0][:-1]))
    assert all(i.startswith("jaxbench:") for i in list_builtin())
    assert suite_dir().is_dir()


@pytest.mark.parametrize("task_id", IDS)
def test_task_matches_published_interface(task_id):
    facts = FACTS[task_id]
    task = load_builtin(f"jaxbench:{task_id}")
    assert task.name == task_id and task.kind == "builtin" and task.default_scale == "full"
    assert task.locator == {"kind": "builtin", "id": f"jaxbench:{task_id}"}
    assert task.source == suite_dir() / f"{task_id}.py"
    assert {"full", "ci"} <= set(task.scales) and task.description.strip()
    # parameters in the facts' order: dynamic inputs, then static args
    assert list(inspect.signature(task.reference).parameters)[: len(facts["params"])] == facts["params"]
    assert [a.name for a in task.args] == [i["name"] for i in facts["inputs"]]
    assert [s.name for s in task.static] == [s["name"] for s in facts["static_args"]]
    assert task.static_values("full") == [s["value"] for s in facts["static_args"]]
    assert task.tolerance.for_output(0) == (facts["atol"], facts["rtol"])
    # full = the published shapes exactly
    assert task.shapes("full") == [tuple(i["shape"]) for i in facts["inputs"]]
    assert [np_dtype(a.dtype) for a in task.args] == [np_dtype(i["dtype"]) for i in facts["inputs"]]
    outs = _leaves(task.output_structs("full"))  # jax.eval_shape: nothing is allocated
    assert [(tuple(o.shape), np.dtype(o.dtype)) for o in outs] == [
        (tuple(o["shape"]), np_dtype(o["dtype"])) for o in facts["outputs"]
    ]


@pytest.mark.parametrize("task_id", IDS)
def test_ci_scale_runs_fast_and_finite(task_id):
    task = load_builtin(task_id)
    shapes = task.shapes("ci")
    assert all(len(s) == len(f) and all(isinstance(d, int) and d > 0 for d in s) for s, f in zip(shapes, task.shapes("full")))
    inputs = task.make_inputs("ci")
    assert [tuple(x.shape) for x in inputs] == shapes
    assert [x.dtype for x in inputs] == [np_dtype(a.dtype) for a in task.args]
    start = time.perf_counter()
    out = jax.block_until_ready(jax.jit(task.bind(task.reference, "ci"))(*inputs))
    assert time.perf_counter() - start < 10.0
    full = _leaves(task.output_structs("full"))
    got = _leaves(out)
    assert [(o.ndim, o.dtype) for o in got] == [(len(o.shape), o.dtype) for o in full]
    for o in got:
        assert np.isfinite(np.asarray(o, np.float32)).all()


def test_ids_resolve_with_or_without_suite_and_unknown_ids_suggest():
    assert load_builtin("12p_RMSNorm").locator["id"] == "jaxbench:12p_RMSNorm"
    with pytest.raises(TaskError) as err:
        load_builtin("jaxbench:12p_RMSNrom")
    assert "jaxbench:12p_RMSNorm" in str(err.value)
    with pytest.raises(TaskError):
        load_builtin("nosuch:12p_RMSNorm")
    with pytest.raises(TaskError):
        load_builtin("jaxbench:../tasks")


def _import_without_mk(path: Path, monkeypatch):
    """Import an exported reference.py while ``mk`` cannot be imported."""
    monkeypatch.setitem(sys.modules, "mk", None)
    monkeypatch.setitem(sys.modules, "mk.task", None)
    spec = importlib.util.spec_from_file_location(f"exported_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.undo()
    return module


# one drawn from Init specs with statics, one with a native generator and statics, one from H3b's part
EXPORT_IDS = ["12p_RMSNorm", "11p_Megablox_GMM", "18k_Conv2D_ReLU_BiasAdd"]


def test_export_maxkernel_round_trip(tmp_path, monkeypatch):
    ids = [i for i in EXPORT_IDS if i in IDS]
    dirs = export_maxkernel(tmp_path, scale="ci", ids=ids)
    assert dirs == [tmp_path / i for i in ids]
    for task_id, d in zip(ids, dirs):
        task = load_builtin(task_id)
        meta = yaml.safe_load((d / "kernel_task.yaml").read_text())
        assert meta["name"] == task_id and meta["description"] == task.description
        assert (meta["atol"], meta["rtol"]) == task.tolerance.for_output(0)
        text = (d / "reference.py").read_text()
        assert "from mk" not in text and "import mk" not in text
        module = _import_without_mk(d / "reference.py", monkeypatch)
        dynamic, static = module.get_inputs()
        expected_inputs = task.make_inputs("ci")
        assert static == task.static_values("ci")
        for a, b in zip(dynamic, expected_inputs, strict=True):
            np.testing.assert_array_equal(np.asarray(a), b)
        got = jax.jit(lambda *xs: module.computation(*xs, *static))(*dynamic)
        want = jax.jit(task.bind(task.reference, "ci"))(*expected_inputs)
        for g, w in zip(_leaves(got), _leaves(want), strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_export_rejects_unknown_scale(tmp_path):
    with pytest.raises(TaskError):
        export_maxkernel(tmp_path, scale="huge", ids=["8p_GEMM"])


def test_export_strips_mk_and_stubs_names_used_outside_task(monkeypatch):
    from mk.suite import _strip_mk

    source = (
        '"""doc"""\nfrom __future__ import annotations\n\nfrom mk.task import (\n    ArgSpec,\n    Init,\n    Task,\n)\n\n'
        "def ref(x):\n    return x + 1\n\n\n_SPEC = ArgSpec('x', (2,), 'float32', Init('ones'))\n\n"
        "TASK = Task(\n    name='t',\n    reference=ref,\n)\n"
    )
    out = _strip_mk(source, None)
    assert "from mk" not in out and "TASK" not in out
    monkeypatch.setitem(sys.modules, "mk", None)
    monkeypatch.setitem(sys.modules, "mk.task", None)
    namespace: dict = {}
    exec(compile(out, "<exported>", "exec"), namespace)
    assert namespace["ref"](1) == 2 and namespace["_SPEC"].args[0] == "x"
    assert "Task" not in namespace  # only the names still in use get stand-ins
