"""Task loaders: every kind, discovery, evaluation-time inputs and the typed errors."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mk.errors import TaskError
from mk.loaders import TaskRef, discover, load_task, load_tasks, task_from_callable
from mk.task import ArgSpec, Init

FIX = Path(__file__).parent / "fixtures" / "tasks"
GOOD = FIX / "good"
BROKEN = FIX / "broken"


# --- MaxKernel ------------------------------------------------------------
def test_maxkernel_rmsnorm_spec():
    task = load_task(GOOD / "maxkernel_rmsnorm")
    assert task.kind == "maxkernel" and task.name == "rmsnorm_fixture"
    assert [(a.name, a.shape, a.dtype, a.init.kind) for a in task.args] == [
        ("x", (64, 256), "float32", "normal"),
        ("weight", (256,), "float32", "normal"),
    ]
    assert [(s.name, s.value) for s in task.static] == [("eps", 1e-6)]
    assert not task.static_as_kwargs
    assert (task.tolerance.atol, task.tolerance.rtol) == (1e-5, 1e-5)
    assert list(task.scales) == ["full"]
    assert task.description.startswith("RMSNorm of a (64, 256)")
    assert task.locator == {"kind": "maxkernel", "path": str((GOOD / "maxkernel_rmsnorm").resolve()), "id": "maxkernel_rmsnorm"}
    assert task.source == (GOOD / "maxkernel_rmsnorm").resolve()


def test_maxkernel_inputs_come_from_generator_at_evaluation_time():
    task = load_task(GOOD / "maxkernel_rmsnorm")
    x, w = task.make_inputs("full")
    k1, _ = jax.random.split(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(x, np.asarray(jax.random.normal(k1, (64, 256), jnp.float32)))
    drawn = task.make_inputs("full", seed=3, distribution="normal")
    assert drawn[0].shape == (64, 256) and not np.array_equal(drawn[0], x)
    out = np.asarray(task.bind(task.reference)(x, w))
    want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert not task.seeded_generator  # get_inputs() takes no seed: every case gets its arrays
    dyn, static = task.generate("full", seed=5)
    assert static == [1e-6] and len(dyn) == 2
    np.testing.assert_array_equal(np.asarray(dyn[0]), x)
    with pytest.raises(TaskError, match="only the 'full' scale"):
        task.native_inputs("ci")


@pytest.mark.parametrize("signature, key, at0", [
    ("key", "key", 0),  # required key: PRNGKey(seed)
    ("seed=0", "jax.random.PRNGKey(seed)", 0),  # mk's own export writes get_inputs(seed=0)
    ("rng=None", "jax.random.PRNGKey(11) if rng is None else rng", 11),  # seed 0 keeps the default
], ids=["key", "seed-default", "rng-default"])
def test_maxkernel_get_inputs_gets_each_cases_seed(tmp_path, signature, key, at0):
    d = _maxkernel_dir(tmp_path, "seeded", f"def get_inputs({signature}):\n    k = {key}\n"
                       "    return [jax.random.normal(k, (8, 4)), jax.random.randint(k, (8,), 0, 500, dtype=jnp.int32)], [2.0]\n"
                       "def computation(x, idx, s):\n    return x * idx[:, None] * s\n")
    task = load_task(d)
    assert task.seeded_generator

    def want(seed):
        return np.asarray(jax.random.randint(jax.random.PRNGKey(seed), (8,), 0, 500, dtype=jnp.int32))

    np.testing.assert_array_equal(task.make_inputs(seed=0)[1], want(at0))
    np.testing.assert_array_equal(task.make_inputs(seed=4)[1], want(4))
    np.testing.assert_array_equal(task.make_inputs(seed=4, distribution="normal")[1], want(4))
    dyn, static = task.native_inputs("full", 4)
    assert static == [2.0] and np.array_equal(np.asarray(dyn[1]), want(4))
    with pytest.raises(TaskError, match="only the 'full' scale"):
        task.native_inputs("ci", 4)


def test_maxkernel_integer_inputs_are_native_and_static_dict_is_kwargs():
    task = load_task(GOOD / "maxkernel_embed")
    assert [a.init.kind for a in task.args] == ["normal", "native", "normal"]
    assert task.static_as_kwargs and [(s.name, s.value) for s in task.static] == [("scale", 0.5)]
    assert task.tolerance.atol == (1e-5, 1e-4) and task.tolerance.rtol == 1e-5
    native = task.make_inputs()
    for seed, dist in ((0, "normal"), (7, "uniform"), (2, "wide")):
        table, ids, resid = task.make_inputs(seed=seed, distribution=dist)
        np.testing.assert_array_equal(ids, native[1])  # never redrawn
        assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 100
        assert not np.array_equal(table, native[0])
    emb, sums = task.bind(task.reference)(*native)
    assert emb.shape == (48, 32) and sums.shape == (48,)


# --- JAXBench -------------------------------------------------------------
def test_jaxbench_baseline_spec_and_inputs():
    task = load_task(GOOD / "jaxbench_xent" / "baseline.py")
    assert task.kind == "jaxbench" and task.name == "jaxbench_xent"
    assert [(a.name, a.shape, a.dtype, a.init.kind) for a in task.args] == [
        ("hidden", (32, 64), "float32", "normal"),
        ("weight", (64, 128), "float32", "normal"),
        ("labels", (32,), "int32", "native"),
    ]
    # `label_smoothing` is a CONFIG entry and a workload parameter; `reduction` keeps its default
    assert task.static_as_kwargs and [(s.name, s.value) for s in task.static] == [("label_smoothing", 0.0)]
    assert task.tolerance.atol == 1e-4 and task.tolerance.rtol == 1e-2  # CONFIG atol, default rtol
    hidden, weight, labels = task.make_inputs()
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)  # seed 0: the loader passes PRNGKey(0) as `key`
    np.testing.assert_array_equal(labels, np.asarray(jax.random.randint(k3, (32,), 0, 128, dtype=jnp.int32)))
    # create_inputs takes a key: each case's seed reaches it as PRNGKey(seed), so the labels change with the seed
    # (and only with the seed: another distribution redraws the floats, not the labels)
    assert task.seeded_generator
    _, _, labels5 = task.make_inputs(seed=5)
    _, _, labels5u = task.make_inputs(seed=5, distribution="uniform")
    k3 = jax.random.split(jax.random.PRNGKey(5), 3)[2]
    np.testing.assert_array_equal(labels5, np.asarray(jax.random.randint(k3, (32,), 0, 128, dtype=jnp.int32)))
    np.testing.assert_array_equal(labels5u, labels5)
    assert not np.array_equal(labels5, labels)
    dyn, static = task.native_inputs("full", 5)
    np.testing.assert_array_equal(np.asarray(dyn[2]), labels5)
    assert static == [0.0]
    with pytest.raises(TaskError, match="only the 'full' scale"):
        task.native_inputs("ci", 0)
    loss = float(task.bind(task.reference)(hidden, weight, labels))
    assert np.isfinite(loss) and loss > 0
    assert load_task(GOOD / "jaxbench_xent").locator == task.locator  # the folder loads the same task


def test_jaxbench_dataset_of_baselines(tmp_path):
    for i, n in enumerate((16, 32)):
        d = tmp_path / f"{i}p_Scale"
        d.mkdir()
        (d / "baseline.py").write_text(
            "import jax, jax.numpy as jnp\n"
            f"CONFIG = {{'n': {n}, 'factor': 3.0}}\n"
            "def create_inputs(dtype=jnp.bfloat16):\n"
            "    return jax.random.normal(jax.random.PRNGKey(1), (CONFIG['n'], 8), dtype=dtype)\n"
            "def workload(x, factor):\n    return x * factor\n"
        )
    refs = discover(tmp_path)
    assert [(r.id, r.kind) for r in refs] == [("0p_Scale", "jaxbench"), ("1p_Scale", "jaxbench")]
    tasks = load_tasks(tmp_path)
    assert [t.shapes() for t in tasks] == [[(16, 8)], [(32, 8)]]
    assert tasks[0].args[0].dtype == "bfloat16" and tasks[0].static[0].value == 3.0
    assert (tasks[0].tolerance.atol, tasks[0].tolerance.rtol) == (1e-2, 1e-2)  # documented default
    assert tasks[0].make_inputs()[0].shape == (16, 8)
    assert not tasks[0].seeded_generator  # no seed or key parameter: one set of inputs for every case


_SEEDED_BASELINE = (
    "import jax, jax.numpy as jnp\n"
    "CONFIG = {{'n': 16}}\n"
    "def create_inputs({params}):\n"
    "    {body}\n"
    "    return jax.random.normal(k, (CONFIG['n'], 8)), jax.random.randint(k, (CONFIG['n'],), 0, 1000, dtype=jnp.int32)\n"
    "def workload(x, idx):\n    return x * idx[:, None]\n"
)


@pytest.mark.parametrize("params, body, at0", [
    ("key", "k = key", 0),  # required: PRNGKey(seed) at every seed, PRNGKey(0) at seed 0 as before
    ("seed", "k = jax.random.PRNGKey(seed)", 0),  # required int seed
    ("rng=None, dtype=jnp.float32", "k = jax.random.PRNGKey(7) if rng is None else rng", 7),  # the default at seed 0
    ("seed=3", "k = jax.random.PRNGKey(seed)", 3),
], ids=["key", "seed", "rng-default", "seed-default"])
def test_jaxbench_generator_gets_each_cases_seed(tmp_path, params, body, at0):
    (tmp_path / "baseline.py").write_text(_SEEDED_BASELINE.format(params=params, body=body))
    task = load_task(tmp_path / "baseline.py")
    assert task.seeded_generator and [a.init.kind for a in task.args] == ["normal", "native"]

    def want(seed):
        return np.asarray(jax.random.randint(jax.random.PRNGKey(seed), (16,), 0, 1000, dtype=jnp.int32))

    np.testing.assert_array_equal(task.make_inputs(seed=0)[1], want(at0))
    for seed in (1, 9):
        np.testing.assert_array_equal(task.make_inputs(seed=seed)[1], want(seed))
    from mk.harness import build_suite

    native = [c for c in build_suite(task, heldout=False).cases if c.distribution == "native"]
    assert [c.seed for c in native] == [0, 1] and not any(c.note for c in native)


def test_jaxbench_parameter_names_that_carry_no_seed(tmp_path):
    # a defaulted parameter counts only under a seed/key name; `keys=4` is a size, not a key
    (tmp_path / "baseline.py").write_text(
        "import jax, jax.numpy as jnp\nCONFIG = {}\n"
        "def create_inputs(keys=4, dtype=jnp.float32):\n"
        "    return jax.random.randint(jax.random.PRNGKey(1), (keys,), 0, 9, dtype=jnp.int32), jnp.ones((keys, 2), dtype)\n"
        "def workload(i, x):\n    return x * i[:, None]\n")
    task = load_task(tmp_path / "baseline.py")
    assert not task.seeded_generator and task.shapes() == [(4,), (4, 2)]
    np.testing.assert_array_equal(task.make_inputs(seed=3)[0], task.make_inputs(seed=0)[0])


# --- mk task modules ------------------------------------------------------
def test_module_with_full_and_ci_scales():
    task = load_task(GOOD / "softmax_module.py")
    assert task.kind == "module" and task.name == "scaled_softmax"
    assert task.shapes("full") == [(4096, 8192)] and task.shapes("ci") == [(16, 128)]
    assert task.locator["kind"] == "module" and task.locator["path"].endswith("softmax_module.py")
    (x,) = task.make_inputs("ci", seed=1)
    assert x.shape == (16, 128) and x.dtype == np.float32
    out = np.asarray(task.bind(task.reference, "ci")(x))
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


def test_module_task_factory_and_dtype_default_tolerance():
    task = load_task(str(GOOD / "gelu_factory.py"))
    assert task.kind == "module" and task.name == "gelu_bias"
    assert (task.tolerance.atol, task.tolerance.rtol) == (2e-2, 1e-2)  # bf16 defaults
    assert [a.name for a in task.args] == ["x", "b"] and task.shapes("ci") == [(8, 128), (128,)]
    x, b = task.make_inputs("ci")
    assert x.dtype == jnp.bfloat16 and b.shape == (128,)


# --- callables ------------------------------------------------------------
def _mlp(x, w, bias, alpha=0.1):
    return jax.nn.leaky_relu(x @ w + bias, alpha)


@pytest.mark.parametrize(
    "shapes",
    [
        [jax.ShapeDtypeStruct((8, 16), jnp.float32), jax.ShapeDtypeStruct((16, 4), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)],
        [np.zeros((8, 16), np.float32), np.zeros((16, 4), np.float32), np.zeros((4,), np.float32)],
        [((8, 16), "float32"), ((16, 4), jnp.float32), ((4,), np.float32)],
        {"bias": ((4,), "float32"), "x": ((8, 16), "float32"), "w": ((16, 4), "float32")},  # reordered by signature
    ],
    ids=["structs", "arrays", "pairs", "dict"],
)
def test_callable_shape_forms(shapes):
    task = task_from_callable(_mlp, shapes)
    assert task.kind == "callable" and task.name == "_mlp"
    assert [(a.name, a.shape, a.dtype) for a in task.args] == [("x", (8, 16), "float32"), ("w", (16, 4), "float32"), ("bias", (4,), "float32")]
    assert (task.tolerance.atol, task.tolerance.rtol) == (1e-4, 1e-4)
    assert task.locator["id"].endswith(":_mlp") and task.locator["path"].endswith("test_loaders.py")
    inputs = task.make_inputs()
    assert task.bind(task.reference)(*inputs).shape == (8, 4)


def test_callable_scales_static_inits_and_tolerance():
    def gather_scale(table, idx, scale, *, unused=None):
        return jnp.take(table, idx, axis=0) * scale

    task = load_task(
        gather_scale,
        scales={"full": [((1000, 64), "float32"), ((512,), "int32")], "ci": {"shapes": [((10, 8), "float32"), ((6,), "int32")], "static": {"scale": 3.0}}},
        static=[2.0],
        atol=[1e-3],
        rtol=1e-3,
        name="gather",
    )
    assert task.name == "gather" and task.default_scale == "full"
    assert [(s.name, s.value) for s in task.static] == [("scale", 2.0)]
    assert task.static_values("ci") == [3.0]
    assert task.args[1].init == Init("randint", low=0, high=6)  # smallest dim over all scales
    table, idx = task.make_inputs("ci", seed=4)
    assert idx.dtype == np.int32 and idx.min() >= 0 and idx.max() < 6
    assert task.tolerance.atol == (1e-3,)
    task2 = task_from_callable(gather_scale, [((10, 8), "float32"), ((6,), "int32")], static={"scale": 1.0},
                               static_as_kwargs=True, inits={"idx": {"kind": "randint", "low": 0, "high": 10}})
    assert task2.args[1].init.high == 10 and task2.static_as_kwargs
    assert task2.bind(task2.reference)(*task2.make_inputs()).shape == (6, 8)


def test_callable_single_input_and_argspec():
    task = task_from_callable(jnp.tanh, ((32,), "bfloat16"), name="tanh")
    assert task.shapes() == [(32,)] and task.args[0].dtype == "bfloat16"
    spec = ArgSpec("a", (4, 4), "float32", Init("uniform", low=-2, high=2))
    task = task_from_callable(lambda a: a * 2, [spec])
    assert task.args[0].init.kind == "uniform" and task.args[0].name == "a"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"shapes": [((8, 16), "float32"), ((15, 4), "float32"), ((4,), "float32")]}, "calling the reference with scale 'full'"),
        ({"shapes": [((8, 16), "float32"), ((16, 4), "float32"), ((4,), "float32")], "atol": [1e-3, 1e-3]}, "lists 2 tolerances but the reference returns 1"),
        ({"scales": {"full": [((8, 16), "float32"), ((16, 4), "float32"), ((4,), "float32")],
                     "ci": [((8, 16), "bfloat16"), ((16, 4), "float32"), ((4,), "float32")]}}, "same input dtypes"),
        ({}, "no input shapes given"),
        ({"shapes": [(8, 16), (16, 4)]}, "cannot read a shape and dtype for input 0"),
        ({"shapes": [((8, 16), "float32")] * 3, "inits": {"nope": "normal"}}, "unknown inputs"),
        ({"shapes": [((8, 16), "int32"), ((16, 4), "float32"), ((4,), "float32")], "inits": {"x": "native"}}, "no input generator"),
    ],
    ids=["bad-shape", "atol-len", "scale-dtypes", "no-shapes", "no-dtype", "bad-inits", "native-init"],
)
def test_callable_errors(kwargs, match):
    with pytest.raises(TaskError, match=match):
        task_from_callable(_mlp, **kwargs)


# --- dispatch ---------------------------------------------------------------
def test_load_task_dispatch_and_locator_round_trip():
    task = load_task(GOOD / "maxkernel_embed")
    assert load_task(task) is task
    again = load_task(dict(task.locator))
    assert again.fingerprint() == task.fingerprint() and again.locator == task.locator
    ref = TaskRef("maxkernel_rmsnorm", "maxkernel", GOOD / "maxkernel_rmsnorm", "maxkernel_rmsnorm")
    assert load_task(ref).name == "rmsnorm_fixture"
    picked = load_task(GOOD, task_id="maxkernel_embed")
    assert picked.name == "maxkernel_embed" and picked.locator["id"] == "maxkernel_embed"
    assert load_task(picked.locator).name == "maxkernel_embed"
    with pytest.raises(TaskError, match="holds 5 tasks"):
        load_task(GOOD)
    with pytest.raises(TaskError, match="no task here has id or name 'nope'"):
        load_task(GOOD, task_id="nope")
    with pytest.raises(TaskError, match="only apply when the task is a Python callable"):
        load_task(GOOD / "maxkernel_embed", shapes=[((4,), "float32")])
    with pytest.raises(TaskError, match="cannot load a task from a int"):
        load_task(3)
    with pytest.raises(TaskError, match="cannot be re-loaded"):
        load_task(task_from_callable(jnp.tanh, ((4,), "float32")).locator)


def test_builtin_ids_dispatch_to_suite(monkeypatch):
    import mk

    calls = []

    def load_builtin(task_id):
        calls.append(task_id)
        if task_id != "jaxbench:12p_RMSNorm":
            raise KeyError(task_id)
        return task_from_callable(jnp.tanh, ((4,), "float32"), name="12p_RMSNorm")

    fake = types.SimpleNamespace(load_builtin=load_builtin, list_builtin=lambda: ["jaxbench:12p_RMSNorm", "8p_GEMM"])
    monkeypatch.setitem(sys.modules, "mk.suite", fake)
    monkeypatch.setattr(mk, "suite", fake, raising=False)
    assert load_task("jaxbench:12p_RMSNorm").name == "12p_RMSNorm"
    assert load_task({"kind": "builtin", "path": "", "id": "jaxbench:12p_RMSNorm"}).name == "12p_RMSNorm"
    with pytest.raises(TaskError, match="unknown built-in task 'jaxbench:nope'"):
        load_task("jaxbench:nope")
    assert [(r.name, r.kind, r.id) for r in discover("jaxbench")] == [
        ("12p_RMSNorm", "builtin", "jaxbench:12p_RMSNorm"), ("8p_GEMM", "builtin", "jaxbench:8p_GEMM")]


# --- discovery --------------------------------------------------------------
def test_discover_good_fixtures():
    refs = discover(GOOD)
    assert [(r.id, r.kind) for r in refs] == [
        ("gelu_factory", "module"),
        ("jaxbench_xent", "jaxbench"),
        ("maxkernel_embed", "maxkernel"),
        ("maxkernel_rmsnorm", "maxkernel"),
        ("softmax_module", "module"),
    ]  # not_a_task.py is skipped
    assert discover(GOOD / "maxkernel_rmsnorm" / "kernel_task.yaml")[0].kind == "maxkernel"
    assert discover(GOOD / "maxkernel_rmsnorm" / "reference.py")[0].path == (GOOD / "maxkernel_rmsnorm").resolve()


def test_discover_nested_dataset_and_empty(tmp_path):
    for cat, name in (("norms", "rms"), ("norms", "layer"), ("matmul", "gemm")):
        d = tmp_path / cat / name
        d.mkdir(parents=True)
        (d / "reference.py").write_text("import jax.numpy as jnp\ndef get_inputs():\n    return [jnp.ones((2, 2))], []\n"
                                        "def computation(a):\n    return a\n")
    (tmp_path / "README.md").write_text("a dataset")
    assert [r.id for r in discover(tmp_path)] == ["matmul/gemm", "norms/layer", "norms/rms"]
    assert [t.locator["id"] for t in load_tasks(tmp_path)] == ["matmul/gemm", "norms/layer", "norms/rms"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskError, match="no tasks found"):
        discover(empty)
    with pytest.raises(TaskError, match="no such file"):
        discover(tmp_path / "missing")
    with pytest.raises(TaskError, match="not a task file"):
        discover(BROKEN / "plain_helper.py")


# --- errors -----------------------------------------------------------------
@pytest.mark.parametrize(
    "name, match",
    [
        ("no_reference", "missing reference.py"),
        ("no_computation", "no function `computation` defined"),
        ("bad_structure", r"get_inputs\(\) must return \(dynamic_args, static_args\), got a tuple of 3 items"),
        ("bad_yaml", "cannot read kernel_task.yaml"),
        ("atol_mismatch", "`atol` lists 3 tolerances but the reference returns 1 output"),
        ("import_error", r"importing the task module failed: RuntimeError: this task module fails on import \(line 4\)"),
        ("syntax_error_module.py", "syntax error at line 7"),
        ("wrong_task_type.py", "is of type int, not an mk.task.Task"),
        ("jaxbench_missing_config.py", "parameter 'eps' is not an input and CONFIG has no 'eps'"),
    ],
)
def test_malformed_tasks_raise_task_error_naming_the_file(name, match):
    with pytest.raises(TaskError, match=match) as info:
        load_task(BROKEN / name)
    assert info.value.path is not None and BROKEN.resolve() in info.value.path.resolve().parents
    assert info.value.hint  # says what to do


def test_module_without_task(tmp_path):
    from mk.loaders import module

    with pytest.raises(TaskError, match="defines neither TASK nor task"):
        module.load(BROKEN / "plain_helper.py")


def _maxkernel_dir(root: Path, name: str, body: str) -> Path:
    d = root / name
    d.mkdir()
    (d / "reference.py").write_text("import jax, jax.numpy as jnp\n" + body)
    return d


def test_untraceable_generator_and_array_static(tmp_path):
    d = _maxkernel_dir(tmp_path, "py_control", "def get_inputs():\n    x = jnp.ones((4,))\n    n = int(x.sum())\n"
                       "    return [jnp.ones((n,))], []\ndef computation(a):\n    return a\n")
    with pytest.raises(TaskError, match="could not trace get_inputs"):
        load_task(d)
    d = _maxkernel_dir(tmp_path, "array_static", "def get_inputs():\n    return [jnp.ones((4,))], [jnp.ones(())]\n"
                       "def computation(a, s):\n    return a * s\n")
    with pytest.raises(TaskError, match="returned a JAX array as static argument 0"):
        load_task(d)


def test_same_file_names_do_not_collide_and_leave_no_import_state(tmp_path):
    path_before, modules_before = list(sys.path), set(sys.modules)
    tasks = []
    for name, factor in (("a", 2.0), ("b", 5.0)):
        d = _maxkernel_dir(tmp_path, name, "from helpers import FACTOR\n"
                           "def get_inputs():\n    return [jnp.ones((3,))], []\n"
                           "def computation(x):\n    return x * FACTOR\n")
        (d / "helpers.py").write_text(f"FACTOR = {factor}\n")
        tasks.append(load_task(d))
    assert [float(t.reference(np.ones(3))[0]) for t in tasks] == [2.0, 5.0]
    assert sys.path == path_before
    new = set(sys.modules) - modules_before
    assert "helpers" not in sys.modules and "reference" not in sys.modules
    assert all(m.startswith("_mk_task_") for m in new if "helpers" in m or "reference" in m)


def test_loading_never_allocates_full_size_inputs(tmp_path):
    # 8 GiB of float32 per input: any allocation would be obvious (and likely fail).
    d = _maxkernel_dir(tmp_path, "huge", "def get_inputs():\n"
                       "    x = jax.random.normal(jax.random.PRNGKey(0), (65536, 32768))\n"
                       "    return [x, jnp.zeros((65536, 32768), jnp.bfloat16)], [3]\n"
                       "def computation(x, y, k):\n    return x + y * k\n")
    task = load_task(d)
    assert task.shapes() == [(65536, 32768), (65536, 32768)]
    assert task.output_structs().shape == (65536, 32768)


def test_maxkernel_yaml_declared_inputs_skip_the_generator_at_load(tmp_path):
    # A numpy generator cannot be traced without allocating; declared inputs mean it runs only at evaluation time.
    marker = tmp_path / "generator_ran"
    d = tmp_path / "np_task"
    d.mkdir()
    (d / "reference.py").write_text(
        "import numpy as np\nimport jax.numpy as jnp\n"
        f"MARKER = {str(marker)!r}\n"
        "def get_inputs():\n"
        "    open(MARKER, 'a').write('x')\n"
        "    rng = np.random.default_rng(0)\n"
        "    return [rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 6, (3,)).astype(np.int32)], [2.0]\n"
        "def computation(*args):\n    x, idx, k = args\n    return jnp.take(x, idx, axis=0) * k\n"
    )
    (d / "kernel_task.yaml").write_text(
        "atol: 1.0e-6\nrtol: 1.0e-6\n"
        "inputs:\n"
        "  - {name: x, shape: [6, 4], dtype: float32, init: {kind: normal, mean: 1.0, std: 0.5}}\n"
        "  - {name: idx, shape: [3], dtype: int32}\n"
        "static_args:\n  - {name: k, value: 2.0}\n"
    )
    task = load_task(d)
    assert not marker.exists()
    assert [(a.name, a.shape, a.dtype, a.init.kind) for a in task.args] == [("x", (6, 4), "float32", "normal"), ("idx", (3,), "int32", "native")]
    assert task.args[0].init.mean == 1.0 and [(s.name, s.value) for s in task.static] == [("k", 2.0)]
    x, idx = task.make_inputs()
    assert marker.exists() and idx.dtype == np.int32
    assert task.bind(task.reference)(x, idx).shape == (3, 4)
    (d / "kernel_task.yaml").write_text("inputs:\n  - {name: x, dtype: float32}\n")
    with pytest.raises(TaskError, match="`inputs` entry 0 must have `shape` and `dtype`"):
        load_task(d)


def test_real_builtin_suite_ids():
    pytest.importorskip("mk.suite")
    task = load_task("jaxbench:12p_RMSNorm")
    assert task.name == "12p_RMSNorm" and "ci" in task.scales
    with pytest.raises(TaskError, match="12q_Nope"):
        load_task("jaxbench:12q_Nope")
    refs = discover("jaxbench")
    assert len(refs) >= 1 and all(r.kind == "builtin" and r.id.startswith("jaxbench:") for r in refs)


def test_integer_inputs_are_drawn_within_their_dtype():
    """An int8 weight of a 256-wide function drew 255 (``OverflowError`` inside ``mk.optimize``: the held-out user
    functions of issue 25 found it); a declared range that does not fit the dtype is a typed error."""
    import jax.numpy as jnp
    import numpy as np

    from mk.errors import TaskError
    from mk.loaders.callable import callable_task

    def f(x, w):
        return x @ w.astype(jnp.float32)

    task, _ = callable_task(f, [((256, 256), "float32"), ((256, 256), "int8")])
    for dist in ("normal", "edges"):
        w = task.make_inputs(task.default_scale, 0, dist)[1]
        assert w.dtype == np.int8 and 0 <= w.min() and w.max() <= 127
    with pytest.raises(TaskError, match="does not fit int8"):
        callable_task(f, [((8, 256), "float32"), ((256, 256), "int8")], inits={"w": {"kind": "randint", "high": 1000}})


def test_an_output_narrower_than_the_inputs_is_compared_at_its_own_precision():
    """float32 in, bfloat16 out (a matmul cast down): one bfloat16 rounding step apart is not wrong; per output."""
    import jax.numpy as jnp

    from mk.loaders.callable import callable_task

    def down(x, w):
        return (x @ w).astype(jnp.bfloat16)

    task, _ = callable_task(down, [((64, 32), "float32"), ((32, 16), "float32")])
    assert (task.tolerance.atol, task.tolerance.rtol) == (2e-2, 1e-2)

    def both(x):
        return x * 2, x.astype(jnp.bfloat16)

    task, _ = callable_task(both, [((64, 32), "float32")])
    assert task.tolerance.for_output(0) == (1e-4, 1e-4) and task.tolerance.for_output(1) == (2e-2, 1e-2)
