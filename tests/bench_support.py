"""Shared pieces of the bench tests: tiny task modules (as source), a scripted author and a suite folder maker.
Used by tests/test_bench_run.py and tests/test_bench_resume.py."""

import textwrap

import fakes
from fakes import tanh2_module

TANH = tanh2_module({"full": (512, 512), "ci": (16, 128)})
EXPSUM = '''
import jax.numpy as jnp
from mk.task import ArgSpec, Scale, Task

def ref(x):
    return jnp.exp(x).sum(axis=-1)

TASK = Task("expsum", ref, (ArgSpec("x", ("M", "N"), "float32"),), {"ci": Scale("ci", {"M": 8, "N": 128})})
'''
RMS = '''
import jax, jax.numpy as jnp
from mk.task import ArgSpec, Init, Scale, Task, Tolerance

def rms(x, w):
    inv = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    return x * inv * w

TASK = Task("rms", rms, (ArgSpec("x", ("M", "N"), "float32"), ArgSpec("w", ("N",), "float32", Init("normal", 1.0, 0.1))),
            {"ci": Scale("ci", {"M": 16, "N": 128})}, tolerance=Tolerance(1e-4, 1e-4))
'''
GOOD = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0\n"
WRONG = "import jax.numpy as jnp\ndef kernel(x):\n    return jnp.tanh(x) * 2.0 + 0.5\n"


class ScriptedAuthor(fakes.ScriptedAuthor):
    """Proposes WRONG then GOOD for tanh2 (so the best of two is correct) and declines everything else."""

    def __init__(self):
        super().__init__([("wrong", WRONG), ("good", GOOD)], only={"tanh2"})


def _suite(tmp_path, files):
    root = tmp_path / "suite"
    root.mkdir()
    for name, text in files.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text))
    return root
