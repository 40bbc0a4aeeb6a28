"""Shared LM fakes for the tests: a DSPy LM scripted per output field, the rmsnorm kernels and plans it answers
with, a knowledge stub, the Gemini client pointed at the local fake server (tests/fake_gemini.py), and the DSPy
state reset every LM test needs (``fresh_dspy``)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import dspy
from dspy.clients.cache import Cache
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.dsp.utils.settings import DEFAULT_CONFIG
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.dummies import DummyLM
from fake_gemini import Agents, FakeGemini

from mk.gemini import gemini_lm
from mk.lm import Accountant, accounted

__all__ = ["Agents", "BROKEN", "CONTINUE", "EXAMPLES", "FakeKnowledge", "KERNEL", "PLAN", "PLAN_A", "STOP", "RoutedLM", "ScriptedLM",
           "fresh_dspy", "gemini", "prompts", "script"]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

PLAN = {"approach": "jax", "strategy": "Compute the mean of squares in f32 and scale in one fused pass over x.",
        "tiling": {}, "memory_placement": "", "pipelining": "", "expected_speedup": 1.2, "risks": ["bf16 rounding"]}
# a trace-time shape error: the harness reports a compile error and the fixer gets the traceback
BROKEN = '''
import jax
import jax.numpy as jnp


def kernel(x, weight, eps):
    x32 = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * jax.lax.rsqrt(ms + eps) @ weight[:3]).astype(x.dtype)
'''
KERNEL = '''
import jax
import jax.numpy as jnp


def kernel(x, weight, eps):
    x32 = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * jax.lax.rsqrt(ms + eps) * weight).astype(x.dtype)
'''
STOP = {"bottleneck": "memory", "evidence": "one read and one write of x; at the memory floor", "next_step": "",
        "decision": "stop", "expected_gain": 1.0}
CONTINUE = {"bottleneck": "memory", "evidence": "HBM at 40% of peak", "next_step": "fuse the cast into the load",
            "decision": "continue", "expected_gain": 1.3}


class _ScriptedEngine(DummyEngine):
    def _complete_messages(self, messages):
        owner = self.owner
        asked = re.search(r"starting with the field `\[\[ ## (\w+) ## \]\]`", messages[-1]["content"])
        field = asked.group(1) if asked else "?"
        owner.asked.append(field)
        queue = owner.script.get(field) or [{}]
        owner.answers = iter([queue.pop(0) if len(queue) > 1 else queue[0]])  # the last answer repeats
        return super()._complete_messages(messages)


class ScriptedLM(DummyLM):
    """Answers by the output field the prompt asks for first (plan, code, fixed_code, analysis, test_cases)."""

    def __init__(self, script: dict[str, list[dict]]):
        super().__init__([])
        self.script = {k: list(v) for k, v in script.items()}
        self.asked: list[str] = []
        self._engine_spec = _ScriptedEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs):  # copies (lm.copy(rollout_id=...)) share the script, as a real LM's share its provider
        copied = super().copy(**kwargs)
        copied._engine_spec, copied._async_engine_spec = self._engine_spec, self._async_engine_spec
        return copied


class _RoutedEngine(DummyEngine):
    def _complete_messages(self, messages):
        text = self.owner.route(messages)
        return Response(id=None, model="dummy", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))


class RoutedLM(DummyLM):
    """A DSPy LM whose every reply is ``route(lm, messages)``, the whole text (for prompts that are not one
    signature's: an optimiser's reflection, an instruction proposal). A copy routes with its own engine."""

    def __init__(self, route):
        super().__init__({})
        self._route = route
        self._engine_spec = _RoutedEngine(self)
        self.asked: list[str] = []

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied._engine_spec = _RoutedEngine(copied)
        return copied

    def route(self, messages) -> str:
        return self._route(self, messages)


class FakeKnowledge:
    def __init__(self):
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int = 5) -> str:
        self.queries.append(query)
        return "[1] Pallas handbook: fuse elementwise work into the reduction pass (handbook.md#fuse)"


PLAN_A = {"approach": "jax", "strategy": "Compute the mean of squares in f32 and scale in one fused pass over x.",
          "tiling": {}, "memory_placement": "", "pipelining": "", "expected_speedup": 1.2, "risks": []}

def fresh_dspy(monkeypatch):
    """No DSPy cache, and DSPy's settings put back afterwards (use from an autouse fixture)."""
    monkeypatch.setattr(dspy, "cache", Cache(False, True, None))
    yield
    dspy.settings.configure(**copy.deepcopy(DEFAULT_CONFIG))


def script(**overrides):
    base = {"plan": [{"plan": PLAN}], "code": [{"code": KERNEL, "config_space": {}}],
            "fixed_code": [{"fixed_code": KERNEL, "explanation": "weight has the hidden size; scale elementwise"}],
            "analysis": [{"analysis": STOP}],
            "test_cases": [{"test_cases": [{"name": "ragged", "shapes": [[1, 5, 256], [256]],
                                            "dtypes": ["bfloat16", "float32"], "rationale": "rows not a multiple of 8"}]}]}
    base.update(overrides)
    return ScriptedLM(base)


def prompts(fake: FakeGemini, field: str) -> list[str]:
    return [s.prompt for s in fake.seen if s.asked == field]


def gemini(fake: FakeGemini, accountant: Accountant | None = None):
    base = gemini_lm("gemini-2.5-flash", api_key="test-key", base_url=fake.base_url, timeout_s=20, num_retries=0, cache=False)
    return accounted(base, accountant or Accountant())
