"""RunConfig: how a run was started, typed, stored with the run so ``mk resume`` restores it exactly.

A run's row keeps ``RunConfig.to_dict()`` as its config. :meth:`RunConfig.from_dict` also reads the shapes
earlier mk versions stored (``task_locator``, ``search`` at the top level, an author given only by name).

The author is kept as a *spec*, a string that rebuilds it in another process or a later session:
``offline`` (the rule-based author), ``lm:<model>`` (mk's LM author over that model; ``gemini/...`` models use
mk's own Gemini engine), or ``package.module:Factory``. An author that cannot be rebuilt has the spec ``""``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping

from mk.budget import Budget
from mk.errors import ConfigError

MODES = ("auto", "search", "hitl", "bench")


@dataclass(frozen=True)
class RunConfig:
    mode: str
    target: str = "tpu"
    #: where the task lives (:func:`mk.loaders.load_task` takes it); ``{"kind": "callable"}`` cannot be re-loaded
    locator: Mapping[str, Any] = field(default_factory=dict)
    #: the task's scales this run kept (a resume keeps exactly these)
    scales: tuple[str, ...] = ()
    author: str = "offline"
    #: the author's display name (``offline``, ``lm:<model>``, a custom author's own name)
    author_name: str = ""
    budget: Budget = field(default_factory=Budget)
    iterations: int = 4
    tune: bool = True
    max_trials: int = 6
    max_fixes: int = 2
    #: mode settings: the search's shape (SearchConfig fields) or the bench method ({"method": ..., "samples": ...})
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: the frozen suite's hash, known once it is frozen
    suite_hash: str | None = None
    #: the folder the kernel and report go to (a resume writes there too unless told otherwise)
    out: str | None = None
    #: synthesized test cases and the scales they need, so a resume rebuilds the same suite without a model
    synthesized: Mapping[str, Any] = field(default_factory=dict)
    #: a custom judge (``module:function``) a search was started with, or None for mk's harness
    evaluate: str | None = None
    #: without a device, an LM author keeps exploring after the first correct kernel (``--explore``)
    explore: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown run mode {self.mode!r}", hint=f"one of {', '.join(MODES)}")
        from mk.targets import get_target

        get_target(self.target)  # a typed error for an unknown target
        object.__setattr__(self, "scales", tuple(self.scales))
        for name in ("iterations", "max_fixes"):
            if int(getattr(self, name)) < 0:
                raise ConfigError(f"{name} must be 0 or more, got {getattr(self, name)}")

    # --- derived ---------------------------------------------------------------------------------
    @property
    def reloadable(self) -> bool:
        """Whether another process can load the task again from ``locator``."""
        return bool(self.locator) and self.locator.get("kind") != "callable"

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    # --- storage ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["locator"], out["settings"], out["synthesized"] = dict(self.locator), dict(self.settings), dict(self.synthesized)
        out["scales"] = list(self.scales)
        out["budget"] = dataclasses.asdict(self.budget)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, mode: str | None = None) -> "RunConfig":
        """A RunConfig from a stored config (this version's or an earlier one's)."""
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        if "locator" not in data and "task_locator" in data:
            data["locator"] = data["task_locator"]
        if "search" in data and not data.get("settings"):
            data["settings"] = data["search"]
        if "method" in data and not data.get("settings"):
            data["settings"] = {k: data[k] for k in ("method", "samples") if k in data}
        if not data.get("target") and isinstance(data.get("settings"), Mapping):
            data["target"] = data["settings"].get("target") or "tpu"
        budget = data.get("budget") or {}
        data["budget"] = budget if isinstance(budget, Budget) else Budget(**{k: v for k, v in dict(budget).items()
                                                                             if k in {"max_lm_calls", "max_cost_usd", "max_wall_s"}})
        data["mode"] = mode or data.get("mode") or "auto"
        if data.get("author") is None:
            data["author"] = ""
        return cls(**{k: v for k, v in data.items() if k in names and v is not None})


def author_spec(author: Any) -> str:
    """The spec that rebuilds ``author`` (see the module docstring), or ``""`` when it cannot be rebuilt."""
    if isinstance(author, str):
        return author
    spec = getattr(author, "spec", None)  # an author that knows how it is rebuilt says so
    if isinstance(spec, str) and spec and not isinstance(author, type):
        return spec
    if type(author).__name__ == "OfflineAuthorAdapter":
        return "offline"
    obj = author if (isinstance(author, type) or inspect.isfunction(author)) else None
    if obj is None or "<locals>" in obj.__qualname__ or obj.__module__ == "__main__":
        return ""
    return f"{obj.__module__}:{obj.__qualname__}"


def author_fields(author: Any) -> dict[str, str]:
    """The RunConfig fields that record ``author``: its spec and its name."""
    return {"author": author_spec(author), "author_name": str(getattr(author, "name", author) or "")}
