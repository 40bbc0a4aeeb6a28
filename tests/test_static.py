"""The static check: every trick it must flag, and ordinary kernels it must not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mk.harness.static import StaticResult, check_source

ADV = Path(__file__).parent / "adversarial"


def check(src: str, target: str = "cpu", require_pallas: bool = False, **kw) -> StaticResult:
    return check_source(textwrap.dedent(src), target=target, require_pallas=require_pallas, **kw)


# --- negatives: ordinary kernels pass -------------------------------------------------------
TILED_MATMUL = """
    import functools
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def _body(x_ref, y_ref, o_ref):
        i, j = pl.program_id(0), pl.program_id(1)
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    @functools.partial(jax.jit, static_argnames=("bm", "bn"))
    def kernel(x, y, *, bm: int = 128, bn: int = 128):
        m, k = x.shape
        _, n = y.shape
        return pl.pallas_call(
            _body,
            grid=(m // bm, n // bn),
            in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, n), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
            out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        )(x, y)
"""

GPU_SOFTMAX = """
    from __future__ import annotations
    import dataclasses
    import math
    from typing import Any
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    @dataclasses.dataclass(frozen=True)
    class Blocks:
        rows: int = 16

        def __post_init__(self):
            if self.rows <= 0:
                raise ValueError(f"expected {self.rows=} > 0")
            object.__setattr__(self, "rows", int(self.rows))

    def _softmax(x_ref, o_ref):
        x = pl.load(x_ref, (slice(None), slice(None)))
        x = x - jnp.max(x, axis=-1, keepdims=True)
        e = jnp.exp(x)
        pl.store(o_ref, (slice(None), slice(None)), e / jnp.sum(e, axis=-1, keepdims=True))

    def kernel(x, blocks: Blocks = Blocks()):
        n = x.shape[0]
        grid = (math.ceil(n / blocks.rows),)
        specs = [pl.BlockSpec((blocks.rows, x.shape[1]), lambda i: (i, 0))]
        cache: dict[str, Any] = {}
        cache["grid"] = grid
        return pl.pallas_call(_softmax, grid=cache["grid"], in_specs=specs, out_specs=specs[0],
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2))(x)

    if __name__ == "__main__":
        print(kernel(jnp.ones((16, 128))))
"""

PURE_JAX = """
    import jax.numpy as jnp
    from jax import lax

    def computation(x, w, eps=1e-6):
        out = []
        for i in range(2):
            out.append(x * w)
        y = sum(out) / 2
        return y * lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + eps)

    def kernel(x, w, eps=1e-6):
        return computation(x, w, eps)
"""


@pytest.mark.parametrize("src,target,require", [
    (TILED_MATMUL, "tpu", True),
    (GPU_SOFTMAX, "gpu", True),
    (PURE_JAX, "cpu", False),
    (PURE_JAX, "tpu", False),
], ids=["tpu-matmul", "gpu-softmax", "cpu-pure-jax", "tpu-pure-jax"])
def test_ordinary_kernels_pass(src, target, require):
    r = check(src, target, require)
    assert r.ok, r.reason
    assert r.reason == "" and r.findings == ()


LIBRARY_STYLE = """
    import dataclasses
    import json
    import re

    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import megablox
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib

    _KIND = re.compile(r"TPU( v)?(\\d+)")

    @dataclasses.dataclass(frozen=True)
    class Tiling:
        tm: int = 128

        def metadata(self):
            return json.dumps(dataclasses.asdict(self))

    def _generation():
        if version := _KIND.match(jax.devices()[0].device_kind):
            return int(version[2])
        raise NotImplementedError("only TPU devices are supported")

    def _shard(sharding, shape):
        try:
            return sharding.shard_shape(shape)
        except ValueError as exc:
            raise ValueError("the sharding must divide the mask blocks evenly") from exc

    def _check(x):
        try:
            return int(x)
        except (TypeError, ValueError) as exc:
            if isinstance(x, str):
                raise ValueError(f"not a number: {x!r}") from exc
            else:
                raise

    def kernel(lhs, rhs, sizes):
        return megablox.gmm(lhs, rhs, sizes, preferred_element_type=jnp.bfloat16, tiling=(128, 128, 128))
"""


def test_library_style_code_passes():
    """Pure modules library kernels use (re, json), the shipped Pallas ops, and handlers that always re-raise."""
    r = check(LIBRARY_STYLE, "tpu", True)
    assert r.ok, r.reason


@pytest.mark.parametrize("src,phrase", [
    ("import json\nO = json.codecs.open\n", "'codecs'"),
    ("import re\nC = re.copyreg\n", "'copyreg'"),
    ("from json import codecs\n", "'codecs'"),
    ("def f(m):\n    return m.codecs\n", "codecs"),
    ("def kernel(x):\n    try:\n        return f(x)\n    except ValueError:\n        if x:\n            raise\n    return x\n",
     "try/except"),
    ("def kernel(x):\n    try:\n        return f(x)\n    except ValueError:\n        return x\n        raise\n", "try/except"),
    ("def kernel(x):\n    for i in x:\n        try:\n            return f(i)\n        except ValueError:\n            continue\n"
     "            raise\n", "try/except"),
    ("def kernel(x):\n    try:\n        return f(x)\n    except ValueError:\n        raise\n    except Exception:\n"
     "        return x\n", "try/except"),
    ("def kernel(x):\n    try:\n        return f(x)\n    except ValueError:\n        raise\n    finally:\n        return x\n",
     "finally"),
], ids=["json-codecs", "re-copyreg", "from-json-codecs", "codecs-anywhere", "conditional-raise", "return-before-raise",
        "continue-in-handler", "one-swallowing-handler", "finally-return-after-raising-handler"])
def test_library_style_leaks_and_swallowing_handlers_are_flagged(src, phrase):
    r = check_source(src, target="cpu", require_pallas=False)
    assert not r.ok and any(phrase in f.message for f in r.findings), [str(f) for f in r.findings]


@pytest.mark.parametrize("name", ["control_pallas_matmul.py", "control_pallas_rmsnorm.py", "control_pure_jax.py"])
def test_control_fixtures_pass(name):
    target = "cpu" if "pure" in name else "tpu"
    r = check_source((ADV / name).read_text(), target=target, require_pallas=target == "tpu")
    assert r.ok, r.reason


# --- positives: each trick is flagged, with its rule and the line -------------------------------
CASES = {
    "import_os": ("import os\ndef kernel(x):\n    return x\n", 8, 1, "import of 'os' is not allowed"),
    "from_import_subprocess": ("from subprocess import run\n", 8, 1, "'subprocess' is not allowed"),
    "relative_import": ("from . import helpers\n", 8, 1, "relative import"),
    "import_time": ("import time\n", 8, 1, "'time' is not allowed"),
    "task_module": ("import reference\n", 8, 1, "task's module"),
    "jax_private": ("import jax\nX = jax._src.config\n", 8, 2, "private"),
    "jax_config": ("import jax\njax.config.update('jax_default_matmul_precision', 'bfloat16')\n", 11, 2, "global JAX configuration"),
    "from_jax_config": ("from jax import config\n", 11, 1, "global JAX configuration"),
    "pure_callback": ("import jax\ndef kernel(x):\n    return jax.pure_callback(f, x, x)\n", 1, 3, "host callbacks"),
    "np_load": ("import numpy as np\nW = np.load('w.npy')\n", 8, 2, "reads or writes files"),
    "jnp_load": ("import jax.numpy as jnp\nW = jnp.load('w.npy')\n", 8, 2, "reads or writes files"),
    "np_testing": ("import numpy as np\nnp.testing.assert_allclose = print\n", 7, 2, "numpy.testing"),
    "module_leak": ("import dataclasses\nS = dataclasses.sys\n", 8, 2, "the sys module"),
    "open": ("def kernel(x):\n    open('/etc/passwd')\n    return x\n", 8, 2, "open opens files"),
    "eval": ("def kernel(x):\n    return eval('x')\n", 8, 2, "eval evaluates code"),
    "exec_alias": ("E = exec\n", 8, 1, "exec executes code"),
    "dunder_import": ("m = __import__('os')\n", 8, 1, "__import__"),
    "globals": ("def kernel(x):\n    globals()['y'] = 1\n", 8, 2, "globals"),
    "vars": ("import numpy as np\nvars(np)['allclose'] = 1\n", 8, 2, "vars"),
    "breakpoint": ("def kernel(x):\n    breakpoint()\n", 8, 2, "breakpoint"),
    "input": ("def kernel(x):\n    input()\n", 8, 2, "input"),
    "dunder_globals": ("def kernel(x):\n    return kernel.__globals__\n", 8, 2, "__globals__"),
    "subclasses": ("S = ().__class__.__bases__[0].__subclasses__()\n", 8, 1, "interpreter internals"),
    "builtins_name": ("B = __builtins__\n", 8, 1, "__builtins__"),
    "frame": ("def g():\n    yield 1\nF = g().gi_frame.f_back\n", 8, 3, "stack frames"),
    "getattr_dunder": ("def kernel(x):\n    return getattr(kernel, '__globals__')\n", 8, 2, "__globals__"),
    "getattr_computed": ("import numpy as np\nf = getattr(np, 'all' + 'close')\n", 8, 2, "computed attribute name"),
    "getattr_alias": ("g = getattr\n", 8, 1, "aliasing"),
    "setattr_module": ("import numpy as np\nsetattr(np, 'allclose', lambda *a, **k: True)\n", 7, 2, "setattr() is not allowed"),
    "attrgetter_computed": ("import operator\nimport numpy as np\nf = operator.attrgetter('all' + 'close')(np)\n", 8, 3, "obfuscated getattr"),
    "format_dunder": ("def kernel(x):\n    return '{0.__globals__}'.format(kernel)\n", 8, 2, "__globals__"),
    "patch_allclose": ("import numpy as np\nnp.allclose = lambda *a, **k: True\n", 7, 2, "patching an imported module"),
    "patch_via_alias": ("import numpy\nt = numpy.testing\n", 7, 2, "numpy.testing"),
    "try_except": ("def kernel(x):\n    y = 1\n    try:\n        y = f(x)\n    except Exception:\n        y = x\n    return y\n",
                   2, 3, "try/except"),
    "finally_return": ("def kernel(x):\n    try:\n        return f(x)\n    finally:\n        return x\n", 2, 2, "finally"),
    "exit_swallow": ("class S:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n        return True\n",
                     2, 4, "__exit__"),
    "global_stmt": ("_R = None\ndef kernel(x):\n    global _R\n    _R = x\n    return _R\n", 3, 3, "global _R"),
    "nonlocal": ("def make():\n    c = None\n    def k(x):\n        nonlocal c\n        c = x\n    return k\n", 3, 4, "nonlocal"),
    "module_dict_write": ("_CACHE = {}\ndef kernel(x):\n    _CACHE[x.shape] = x\n    return _CACHE[x.shape]\n",
                          3, 3, "module-level '_CACHE'"),
    "module_list_append": ("_SEEN = []\ndef kernel(x):\n    _SEEN.append(x)\n    return x\n", 3, 3, "_SEEN.append"),
    "module_setdefault": ("_C = {}\ndef kernel(x):\n    return _C.setdefault(x.shape, x)\n", 3, 3, "_C.setdefault"),
    "function_attr": ("def kernel(x):\n    kernel.last = x\n    return x\n", 3, 2, "module-level 'kernel'"),
    "mutable_default": ("def kernel(x, _cache={}):\n    return x\n", 3, 1, "mutable default"),
    "instance_state": ("class K:\n    def __init__(self):\n        self.c = {}\n    def __call__(self, x):\n"
                       "        self.c[x.shape] = x\n        return x\n", 3, 5, "outside __init__"),
    "string_annotation": ("import jax\ndef kernel(x: \"setattr(jax, 'jit', print)\"):\n    return x\n", 8, 2, "string annotation"),
    "future_annotation": ("from __future__ import annotations\ndef kernel(x: open('/etc/passwd')):\n    return x\n",
                          8, 2, "open opens files"),
    "get_type_hints": ("import typing\nH = typing.get_type_hints\n", 8, 2, "evaluates strings"),
    "attrgetter_literal_chain": ("import operator\nimport numpy as np\nf = operator.attrgetter('lib.npyio.loadtxt')(np)\n",
                                 8, 3, "loadtxt"),
    "module_as_argument": ("import dataclasses\ndef f(m):\n    return m.sys.modules\nS = f(dataclasses)\n", 8, 3, "'sys'"),
    "loadtxt_any_root": ("def f(m, p):\n    return m.loadtxt(p)\n", 8, 2, "file access"),
    "object_setattr_outside_init": ("def p(self, v):\n    object.__setattr__(self, 'allclose', v)\n", 8, 2, "__setattr__"),
    "reference_call": ("import jax.numpy as jnp\ndef kernel(x):\n    return reference(x)\n", 1, 3, "refers to 'reference'"),
    "syntax": ("def kernel(x:\n", 0, 1, "SyntaxError"),
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_trick_is_flagged(key):
    src, rule, line, phrase = CASES[key]
    r = check_source(src, target="cpu", require_pallas=False)
    assert not r.ok
    hits = [f for f in r.findings if phrase in f.message]
    assert hits, f"{key}: no finding mentions {phrase!r}: {[str(f) for f in r.findings]}"
    assert hits[0].rule == rule and hits[0].line == line, str(hits[0])
    assert r.reason.startswith("static check: line ")
    assert "\n" not in r.reason


def test_reason_names_line_of_try():
    r = check("import jax.numpy as jnp\n\ndef kernel(x):\n    try:\n        return jnp.sin(x)\n    except Exception:\n        return x\n")
    assert r.reason.startswith("static check: line 4: try/except")
    assert "rule 2" in r.reason


def test_rule1_is_judged_on_the_program_not_the_source():
    """A kernel that only calls a library Pallas op never names pallas_call; the exported program decides
    (tests/test_adversarial.py: rule01_plain_jnp is rejected there with "no pallas_call kernel in the program")."""
    src = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.sin(x)\n"
    for target in ("tpu", "gpu", "cpu"):
        assert check(src, target, True).ok


def test_pallas_entry_points_are_recognised():
    for src in ("from jax.experimental.pallas import pallas_call\ndef kernel(x):\n    return pallas_call(f, out_shape=x)(x)\n",
                "from jax.experimental.pallas import mosaic_gpu as plgpu\ndef kernel(x):\n    return plgpu.kernel(f, out_shape=x)(x)\n",
                "import jax.experimental.pallas as pl\ndef kernel(x):\n    return pl.core_map(f)\n"):
        assert check(src, "gpu", True).ok, src


def test_locals_shadowing_builtins_and_task_names_are_fine():
    src = """
        import jax.numpy as jnp

        def reference(x):
            return jnp.sin(x)

        def kernel(input, compile=False):
            return reference(input) if compile else jnp.sin(input)
    """
    assert check(src).ok


def test_extra_task_names():
    r = check("import my_task\n", task_names=["my_task"])
    assert not r.ok and "task's module" in r.reason


def test_local_containers_and_closures_are_fine():
    src = """
        import jax.numpy as jnp

        TABLE = {"relu": 0}

        def kernel(x):
            acc = {}
            acc["a"] = x
            parts = []
            def inner(y):
                parts.append(y)
                acc["b"] = y
            inner(x)
            return acc["a"] + acc["b"] + TABLE["relu"] + parts[0]
    """
    assert check(src).ok


def test_multiple_findings_sorted_and_counted():
    r = check("import os\nimport sys\n")
    assert [f.line for f in r.findings] == [1, 2]
    assert r.reason.endswith("(+1 more)")


def test_functional_updates_and_alias_cycles():
    src = """
        import jax.numpy as jnp
        import numpy as np

        _TABLE = jnp.arange(8.0)
        x = np.linalg
        x = x.norm

        def kernel(v):
            return v + _TABLE.at[0].add(1.0) + x(v)
    """
    assert check(src).ok
