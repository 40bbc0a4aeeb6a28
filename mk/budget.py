"""Budgets and prices for LM calls.

A :class:`Budget` is the limit a run accepts (LM calls, estimated cost, wall
time); a :class:`BudgetMeter` spends it and raises
:class:`~mk.errors.BudgetExceeded` with the reason once a limit is reached.
Prices are data (``data/prices.json``), read by :class:`PriceTable`.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from mk.errors import BudgetExceeded, ConfigError

log = logging.getLogger(__name__)

#: provider prefixes that DSPy model strings carry ("gemini/gemini-2.5-pro")
_PREFIXES = ("gemini/", "vertex_ai/", "vertex/", "google/", "openai/", "anthropic/", "azure/", "openrouter/", "models/")


@dataclass(frozen=True)
class Budget:
    """Limits for one run; ``None`` means unlimited."""

    max_lm_calls: int | None = None
    max_cost_usd: float | None = None
    max_wall_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_lm_calls", "max_cost_usd", "max_wall_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"budget {name} must be >= 0, got {value}", hint="pass a non-negative limit or None")

    @property
    def unlimited(self) -> bool:
        return self.max_lm_calls is None and self.max_cost_usd is None and self.max_wall_s is None


@dataclass(frozen=True)
class BudgetUsage:
    """What a meter has spent so far."""

    lm_calls: int
    cost_usd: float
    wall_s: float


class BudgetMeter:
    """Spends a :class:`Budget`. Thread-safe; the wall clock starts at construction.

    :meth:`check` is called before every LM call (and by the orchestrator
    between phases); :meth:`charge` after every call that reached a provider.
    """

    def __init__(self, budget: Budget | None = None, *, clock: Callable[[], float] = time.monotonic):
        self.budget = budget or Budget()
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._calls = 0
        self._cost = 0.0

    def start_at(self, started: Any) -> None:
        """Count wall time from ``started`` (a naive UTC datetime: a run's ``started_at`` as the store records it), so
        the time spent and the run's own start are one instant; calls and cost spent so far are kept."""
        from datetime import datetime, timezone

        behind = (datetime.now(timezone.utc).replace(tzinfo=None) - started).total_seconds()
        with self._lock:
            self._start = self._clock() - max(0.0, behind)

    def usage(self) -> BudgetUsage:
        with self._lock:
            return BudgetUsage(self._calls, self._cost, self._clock() - self._start)

    def charge(self, *, calls: int = 1, cost_usd: float | None = 0.0) -> None:
        with self._lock:
            self._calls += calls
            self._cost += cost_usd or 0.0

    def exceeded(self) -> str | None:
        """The reason the budget is spent, or None while some is left."""
        b, u = self.budget, self.usage()
        if b.max_lm_calls is not None and u.lm_calls >= b.max_lm_calls:
            return f"LM-call budget spent: {u.lm_calls} of {b.max_lm_calls} calls"
        if b.max_cost_usd is not None and u.cost_usd >= b.max_cost_usd:
            return f"cost budget spent: ${u.cost_usd:.4f} of ${b.max_cost_usd:.4f}"
        if b.max_wall_s is not None and u.wall_s >= b.max_wall_s:
            return f"wall-time budget spent: {u.wall_s:.1f} s of {b.max_wall_s:.1f} s"
        return None

    def check(self) -> None:
        """Raise :class:`BudgetExceeded` when any limit is reached."""
        reason = self.exceeded()
        if reason is not None:
            u = self.usage()
            raise BudgetExceeded(
                f"the run stopped: {reason}",
                hint="raise the limit (--budget-calls, --budget-cost, --budget-time) or resume the run with a new budget",
                lm_calls=u.lm_calls,
                cost_usd=round(u.cost_usd, 6),
                wall_s=round(u.wall_s, 3),
            )


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one model."""

    input: float
    output: float
    cached_input: float | None = None
    long_context_threshold: int | None = None
    input_long: float | None = None
    output_long: float | None = None
    cached_input_long: float | None = None

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """Estimated USD. ``input_tokens`` includes ``cached_tokens`` (as Gemini and OpenAI report)."""
        long = self.long_context_threshold is not None and input_tokens > self.long_context_threshold
        p_in = self.input_long if long and self.input_long is not None else self.input
        p_out = self.output_long if long and self.output_long is not None else self.output
        p_cached = self.cached_input_long if long and self.cached_input_long is not None else self.cached_input
        cached = min(max(cached_tokens, 0), input_tokens) if p_cached is not None else 0
        usd = (input_tokens - cached) * p_in + cached * (p_cached or 0.0) + output_tokens * p_out
        return usd / 1_000_000


@dataclass(frozen=True)
class PriceTable:
    """Model prices; look-up strips the provider prefix and takes the longest matching key."""

    prices: Mapping[str, Price] = field(default_factory=dict)
    as_of: str = ""

    @classmethod
    def load(cls, path: str | Path | None = None) -> "PriceTable":
        try:
            if path is None:
                text = resources.files("mk.data").joinpath("prices.json").read_text()
            else:
                text = Path(path).read_text()
            raw = json.loads(text)
            models = {str(k): Price(**v) for k, v in raw["models"].items()}
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"cannot read the LM price table {path or 'mk/data/prices.json'}: {exc}",
                              hint="fix the JSON: {'models': {'<model>': {'input': usd_per_M, 'output': usd_per_M}}}") from exc
        return cls(models, str(raw.get("as_of", "")))

    def lookup(self, model: str) -> Price | None:
        name = model.lower()
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
        best = max((k for k in self.prices if name.startswith(k.lower())), key=len, default=None)
        return self.prices[best] if best is not None else None

    def estimate(self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float | None:
        """Estimated USD for one call, or None when the model has no price."""
        price = self.lookup(model)
        if price is None:
            _warn_unpriced(model)
            return None
        return price.cost(input_tokens, output_tokens, cached_tokens)


@functools.lru_cache(maxsize=None)
def _warn_unpriced(model: str) -> None:
    log.warning("no price for LM %r in data/prices.json: its calls are recorded without a cost "
                "and do not count against a cost budget", model)


@functools.lru_cache(maxsize=1)
def default_prices() -> PriceTable:
    return PriceTable.load()


def usage_tokens(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """(input, output, cached input) tokens from a DSPy usage dict (``prompt_tokens`` ...)."""
    def num(v: Any) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0

    details = usage.get("prompt_tokens_details") or {}
    cached = num(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    return num(usage.get("prompt_tokens")), num(usage.get("completion_tokens")), cached
