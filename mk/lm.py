"""LM set-up and accounting. DSPy is mk's only LM interface.

Resolution order (:func:`resolve_lm`): an explicit ``lm=`` / ``--lm`` →
``MK_LM`` (any DSPy model string) → ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``
(Gemini through :class:`mk.gemini.GeminiEngine`, on Vertex AI when
``GOOGLE_GENAI_USE_VERTEXAI`` is set) → ``offline`` (the rule-based author).
The answer is a typed :class:`LMChoice`; callers decide what offline means,
and :func:`require_lm` raises :class:`~mk.errors.ConfigError` for callers
that need a model.

Accounting sits at the LM seam: :func:`accounted` returns a copy of any DSPy
LM whose every call is checked against a budget and recorded by an
:class:`Accountant` (run, node, sub-agent, model, tokens, latency, estimated
cost, cache hit). The sub-agent name comes from a context variable that each
sub-agent's ``forward`` sets with :func:`mk.scopes.agent_scope`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Literal, Mapping

from mk.budget import Budget, BudgetMeter, PriceTable, default_prices, usage_tokens
from mk.errors import ConfigError, MkError
from mk.scopes import agent_scope, current_agent, current_node, node_scope  # noqa: F401 - mk.lm.agent_scope, as before

log = logging.getLogger(__name__)

DEFAULT_GEMINI_MODEL = "gemini-2.5-pro"
OFFLINE = "offline"


# --- resolution --------------------------------------------------------------
@dataclass(frozen=True)
class LMChoice:
    """Which LM a run uses. ``kind`` is ``explicit`` (lm= / --lm), ``env``
    (MK_LM), ``gemini``, ``vertex`` or ``offline`` (``lm`` is then None)."""

    kind: Literal["explicit", "env", "gemini", "vertex", "offline"]
    lm: Any
    model: str
    reason: str

    @property
    def offline(self) -> bool:
        return self.kind == "offline"


_HOW_TO_CONFIGURE = (
    "set GEMINI_API_KEY (or GOOGLE_API_KEY), or MK_LM to any DSPy model string such as 'openai/gpt-4o', "
    "or pass --lm / lm=; without a model mk runs its offline rule-based author"
)


def resolve_lm(lm: Any = None, *, environ: Mapping[str, str] | None = None, num_retries: int = 3,
               timeout_s: float = 300.0) -> LMChoice:
    """Choose the LM (see the module docstring for the order). Never calls the network."""
    import dspy

    env = os.environ if environ is None else environ
    if lm is not None:
        if isinstance(lm, dspy.BaseLM):
            return LMChoice("explicit", lm, str(lm.model), "lm= was passed a DSPy LM")
        if isinstance(lm, str) and lm.strip():
            return _from_string(lm.strip(), "explicit", "lm= / --lm names the model", num_retries)
        raise ConfigError(f"lm= must be a DSPy model string or a dspy.LM, got {type(lm).__name__}", hint=_HOW_TO_CONFIGURE)
    if env.get("MK_LM", "").strip():
        return _from_string(env["MK_LM"].strip(), "env", "MK_LM names the model", num_retries)
    vertex = _truthy(env.get("GOOGLE_GENAI_USE_VERTEXAI"))
    key = env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY") or None
    if key or vertex:
        from mk.gemini import gemini_lm

        model = env.get("MK_GEMINI_MODEL", "").strip() or DEFAULT_GEMINI_MODEL
        found = "GEMINI_API_KEY" if env.get("GEMINI_API_KEY") else "GOOGLE_API_KEY" if key else "GOOGLE_GENAI_USE_VERTEXAI"
        made = gemini_lm(model, api_key=key, vertexai=vertex, project=env.get("GOOGLE_CLOUD_PROJECT"),
                         location=env.get("GOOGLE_CLOUD_LOCATION"), timeout_s=timeout_s, num_retries=num_retries)
        return LMChoice("vertex" if vertex else "gemini", made, made.model, f"{found} is set")
    return LMChoice("offline", None, OFFLINE, f"no language model is configured ({_HOW_TO_CONFIGURE})")


def require_lm(lm: Any = None, **kwargs: Any) -> LMChoice:
    """Like :func:`resolve_lm`, but raise :class:`ConfigError` when only offline is left."""
    choice = resolve_lm(lm, **kwargs)
    if choice.offline:
        raise ConfigError("this needs a language model and none is configured", hint=_HOW_TO_CONFIGURE)
    return choice


def _from_string(model: str, kind: Literal["explicit", "env"], reason: str, num_retries: int) -> LMChoice:
    import dspy

    if model == OFFLINE:
        return LMChoice("offline", None, OFFLINE, f"{reason}: offline")
    if model.startswith(("gemini/", "vertex_ai/")):  # mk's own Gemini engine (google-genai), not a litellm route
        from mk.gemini import gemini_lm

        vertex = model.startswith("vertex_ai/")
        key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY") or None
        made = gemini_lm(model, api_key=key, vertexai=vertex, project=os.environ.get("GOOGLE_CLOUD_PROJECT"),
                         location=os.environ.get("GOOGLE_CLOUD_LOCATION"), num_retries=num_retries)
        return LMChoice(kind, made, made.model, reason + " (through mk's Gemini engine)")
    try:
        return LMChoice(kind, dspy.LM(model, num_retries=num_retries), model, reason)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{model!r} is not a DSPy model string: {exc}", hint="use 'provider/model', e.g. 'openai/gpt-4o'") from exc


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


# --- accounting ----------------------------------------------------------------
@dataclass(frozen=True)
class LMCall:
    """One LM call as recorded."""

    run_id: str | None
    node_id: str | None
    agent: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    cost_usd: float | None
    cache_hit: bool
    error: str | None = None


class Accountant:
    """Checks the budget before every LM call and records every call.

    ``store`` is an :class:`mk.store.Store` (anything with ``record_lm_call``);
    without one, calls are kept in :attr:`calls` only. Thread-safe.
    """

    def __init__(self, store: Any = None, *, run_id: str | None = None,
                 budget: Budget | BudgetMeter | None = None, prices: PriceTable | None = None):
        self.store = store
        self.run_id = run_id
        self.meter = budget if isinstance(budget, BudgetMeter) else BudgetMeter(budget)
        self.prices = prices or default_prices()
        self.calls: list[LMCall] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def metered(self, model: str) -> Iterator[None]:
        """Wrap one LM call: budget check, usage probe, timing, record."""
        import dspy

        self.meter.check()
        probe = _UsageProbe(dspy.settings.usage_tracker)
        error: str | None = None
        start = time.perf_counter()
        try:
            with dspy.context(usage_tracker=probe):
                yield
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"[:1000]
            raise
        finally:
            self._record(model, probe, time.perf_counter() - start, error)

    def _record(self, model: str, probe: "_UsageProbe", latency_s: float, error: str | None) -> None:
        tokens_in, tokens_out, cached = usage_tokens(probe.usage)
        cache_hit = error is None and not probe.called
        cost = 0.0 if cache_hit else self.prices.estimate(model, tokens_in, tokens_out, cached)
        call = LMCall(self.run_id, current_node(), current_agent() or "unattributed", model, tokens_in, tokens_out,
                      round(latency_s, 6), cost, cache_hit, error)
        if not cache_hit:
            self.meter.charge(calls=1, cost_usd=cost)
        with self._lock:
            self.calls.append(call)
        if self.store is not None:
            try:
                self.store.record_lm_call(**asdict(call))
            except MkError as exc:  # the answer is already paid for: keep it, say so loudly
                log.error("could not record an LM call in the store: %s", exc)

    def total_cost(self) -> float:
        with self._lock:
            return sum(c.cost_usd or 0.0 for c in self.calls)


class _UsageProbe:
    """Stands in for DSPy's usage tracker during one call: DSPy reports the
    usage of every call that reached a provider (never of a cache hit)."""

    def __init__(self, parent: Any = None):
        self.parent = parent
        self.called = False
        self.usage: dict[str, Any] = {}

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        self.called = True
        for key, value in (usage_entry or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.usage[key] = self.usage.get(key, 0) + value
            elif isinstance(value, Mapping):
                inner = dict(self.usage.get(key) or {})
                for k, v in value.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        inner[k] = inner.get(k, 0) + v
                self.usage[key] = inner
        if self.parent is not None:
            self.parent.add_usage(lm, usage_entry)


class _AccountingMixin:
    """Routes every call of a DSPy LM through its :class:`Accountant`."""

    _mk_accountant: Accountant | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        accountant = self._mk_accountant
        if accountant is None:
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        with accountant.metered(self.model):  # type: ignore[attr-defined]
            return super().__call__(*args, **kwargs)  # type: ignore[misc]

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        accountant = self._mk_accountant
        if accountant is None:
            return await super().acall(*args, **kwargs)  # type: ignore[misc]
        with accountant.metered(self.model):  # type: ignore[attr-defined]
            return await super().acall(*args, **kwargs)  # type: ignore[misc]


@functools.lru_cache(maxsize=None)
def _accounted_class(cls: type) -> type:
    if issubclass(cls, _AccountingMixin):
        return cls
    return type(f"Accounted{cls.__name__}", (_AccountingMixin, cls), {"__module__": __name__})


def accounted(lm: Any, accountant: Accountant) -> Any:
    """A copy of the DSPy LM ``lm`` whose calls ``accountant`` meters and records.

    The copy shares ``lm``'s engine and connection; ``lm`` itself is unchanged.
    """
    import dspy

    if not isinstance(lm, dspy.BaseLM):
        raise ConfigError(f"only a DSPy LM can be accounted, got {type(lm).__name__}", hint=_HOW_TO_CONFIGURE)
    new = copy.copy(lm)
    new.__class__ = _accounted_class(type(lm))
    new._mk_accountant = accountant
    return new


def lm_failed(exc: BaseException) -> bool:
    """True when ``exc`` is a provider failure DSPy gave up on after its retries (rate limit, server error,
    timeout, transport): the run ends ``failed`` and keeps what it found. A key, billing or configuration
    problem is not this (mk says how to fix it instead)."""
    try:
        from dspy.utils import exceptions as dspy_errors
        from dspy import lm15
    except ImportError:  # pragma: no cover - another DSPy version
        return False
    unusable = (dspy_errors.LMAuthError, dspy_errors.LMBillingError, dspy_errors.LMConfigurationError,
                dspy_errors.LMNotConfiguredError, lm15.AuthError, lm15.BillingError, lm15.ConfigurationError,
                lm15.NotConfiguredError)
    return isinstance(exc, (dspy_errors.LMError, lm15.LM15Error)) and not isinstance(exc, unusable)
