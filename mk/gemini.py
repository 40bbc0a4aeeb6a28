"""Gemini through google-genai, as a DSPy engine (``dspy.LM(model, engine=GeminiEngine(...))``).

DSPy's engine contract: ``complete(Request) -> Response``, one attempt per
call; DSPy owns caching, retries (with backoff, honouring ``retry_after``)
and callbacks. So this engine turns off google-genai's own retries and maps
every failure to the ``dspy.lm15`` error DSPy classifies: 429 → RateLimitError,
5xx → ServerError, a timeout → TimeoutError (all retried by DSPy), 4xx →
InvalidRequestError / AuthError (not retried), an unreadable answer →
ProviderError.

Per sub-agent settings (temperature, thinking) come from the agent named by
:func:`mk.scopes.current_agent`; a value the request sets itself wins.

Usage is reported with ``output_tokens`` = visible + thinking tokens (what
Gemini bills as output) and ``reasoning_tokens`` = thinking tokens.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from dspy import lm15
from dspy.lm15 import Message, Request, Response, TextPart, ThinkingPart, Usage

from mk.scopes import current_agent

log = logging.getLogger(__name__)

PROVIDER = "gemini"
_ENV_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
_MODEL_PREFIXES = ("gemini/", "vertex_ai/", "vertex/", "google/", "models/")
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
           "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
           "IMAGE_SAFETY": "content_filter", "MODEL_ARMOR": "content_filter"}
#: thinking tokens per reasoning effort, for budget-style (Gemini 2.x) models
_EFFORT_BUDGET = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576, "xhigh": 32768, "max": 32768}


@dataclass(frozen=True)
class AgentSettings:
    """Generation settings for one sub-agent. ``thinking_budget`` is in tokens
    (Gemini 2.x; 0 turns thinking off where the model allows, -1 lets it decide);
    ``thinking_level`` is ``"low"`` or ``"high"`` (Gemini 3)."""

    temperature: float | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None
    max_output_tokens: int | None = None


#: Creative where the search needs ideas, strict where it needs repairs.
DEFAULT_AGENT_SETTINGS: Mapping[str, AgentSettings] = {
    "planner": AgentSettings(temperature=1.0, thinking_budget=8192, thinking_level="high"),
    "implementer": AgentSettings(temperature=0.7, thinking_budget=8192, thinking_level="high"),
    "compile_fixer": AgentSettings(temperature=0.2, thinking_budget=2048, thinking_level="low"),
    "test_synthesizer": AgentSettings(temperature=0.4, thinking_budget=2048, thinking_level="low"),
    "tuning_space": AgentSettings(temperature=0.3, thinking_budget=1024, thinking_level="low"),
    "profile_analyst": AgentSettings(temperature=0.3, thinking_budget=4096, thinking_level="low"),
}


class GeminiEngine:
    """A DSPy engine over the google-genai client.

    ``base_url`` points the client elsewhere (a proxy, or a local fake server in
    tests); ``timeout_s`` bounds each HTTP request. The client is created on the
    first call, so building an engine needs no network and no credentials.
    """

    def __init__(self, *, api_key: str | None = None, vertexai: bool = False, project: str | None = None,
                 location: str | None = None, base_url: str | None = None, timeout_s: float = 300.0,
                 agent_settings: Mapping[str, AgentSettings] | None = None,
                 default_settings: AgentSettings = AgentSettings()):
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.api_key = api_key
        self.vertexai = vertexai
        self.project = project
        self.location = location
        import os

        #: MK_GEMINI_BASE_URL (or google-genai's own GOOGLE_GEMINI_BASE_URL) points every call at a proxy or a test server
        self.base_url = base_url or os.environ.get("MK_GEMINI_BASE_URL") or os.environ.get("GOOGLE_GEMINI_BASE_URL") or None
        self.timeout_s = float(timeout_s)
        self.agent_settings = dict(DEFAULT_AGENT_SETTINGS if agent_settings is None else agent_settings)
        self.default_settings = default_settings
        self._client: Any = None
        self._lock = threading.Lock()

    # --- DSPy engine contract -------------------------------------------------
    def complete(self, request: Request) -> Response:
        from dspy.clients.engines.base import validate_request

        validate_request(request)
        model = _model_id(request.model)
        contents, config = self._translate(request, model)
        client = self._get_client()
        try:
            raw = client.models.generate_content(model=model, contents=contents, config=config)
        except Exception as exc:  # noqa: BLE001 - every SDK failure becomes a typed lm15 error
            raise self._error(exc) from exc
        return _response(raw, request.model)

    def stream(self, request: Request) -> Iterator[Any]:
        return lm15.response_to_events(self.complete(request))

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # --- persistence (no secrets: the key is read from the environment) --------
    def dump_state(self) -> dict[str, Any]:
        return {"vertexai": self.vertexai, "project": self.project, "location": self.location,
                "base_url": self.base_url, "timeout_s": self.timeout_s}

    @classmethod
    def load_state(cls, state: Mapping[str, Any]) -> "GeminiEngine":
        import os

        key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        return cls(api_key=key, **dict(state))

    # --- internals ------------------------------------------------------------
    def settings_for(self, agent: str | None) -> AgentSettings:
        return self.agent_settings.get(agent or "", self.default_settings)

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        from google import genai
        from google.genai import types

        options = types.HttpOptions(base_url=self.base_url, timeout=int(self.timeout_s * 1000),
                                    retry_options=types.HttpRetryOptions(attempts=1))
        if not self.vertexai and not self.api_key:
            raise lm15.NotConfiguredError("no Gemini API key: set GEMINI_API_KEY or GOOGLE_API_KEY",
                                          provider=PROVIDER, env_keys=_ENV_KEYS)
        try:
            if self.vertexai:
                kw = {"api_key": self.api_key} if self.api_key else {"project": self.project, "location": self.location}
                return genai.Client(vertexai=True, http_options=options, **kw)
            return genai.Client(api_key=self.api_key, http_options=options)
        except Exception as exc:  # noqa: BLE001 - e.g. no Vertex project or credentials
            raise lm15.ConfigurationError(
                f"cannot create the Gemini client: {exc}. For Vertex AI set GOOGLE_CLOUD_PROJECT and "
                "GOOGLE_CLOUD_LOCATION and log in with `gcloud auth application-default login`",
                provider=PROVIDER) from exc

    def _translate(self, request: Request, model: str) -> tuple[list[Any], Any]:
        from google.genai import types

        cfg = request.config
        if request.tools or cfg.tool_choice is not None:
            raise lm15.UnsupportedFeatureError("mk's Gemini engine sends no tools", feature="tools")
        if cfg.logprobs is not None:
            raise lm15.UnsupportedFeatureError("mk's Gemini engine does not request logprobs", feature="logprobs")
        contents = [_content(m) for m in request.messages]
        agent = self.settings_for(current_agent())
        fields: dict[str, Any] = {
            "system_instruction": _system_text(request.system),
            "temperature": cfg.temperature if cfg.temperature is not None else agent.temperature,
            "top_p": cfg.top_p,
            "top_k": cfg.top_k,
            "max_output_tokens": cfg.max_tokens if cfg.max_tokens is not None else agent.max_output_tokens,
            "stop_sequences": list(cfg.stop) or None,
            "seed": cfg.seed,
            "presence_penalty": cfg.presence_penalty,
            "frequency_penalty": cfg.frequency_penalty,
            "candidate_count": 1,
            "thinking_config": _thinking(cfg.reasoning, agent, model),
        }
        fields.update(_response_format(cfg.response_format))
        return contents, types.GenerateContentConfig(**{k: v for k, v in fields.items() if v is not None})

    def _error(self, exc: Exception) -> lm15.LM15Error:
        import pydantic
        from google.genai import errors as genai_errors

        if isinstance(exc, lm15.LM15Error):
            return exc
        if isinstance(exc, genai_errors.APIError):
            message = f"Gemini answered {exc.code} {exc.status or ''}: {exc.message or exc.details}".strip()
            return _http_error(int(exc.code or 0), message, status_name=exc.status, retry_after=_retry_after(exc))
        if _httpx_kind(exc, "TimeoutException") or isinstance(exc, TimeoutError):
            return lm15.TimeoutError(f"Gemini did not answer within {self.timeout_s:g} s ({type(exc).__name__})",
                                     provider=PROVIDER)
        if _httpx_kind(exc, "TransportError") or isinstance(exc, ConnectionError):
            return lm15.TransportError(f"could not reach Gemini: {exc}", provider=PROVIDER)
        if isinstance(exc, (pydantic.ValidationError, json.JSONDecodeError, ValueError, KeyError, TypeError)):
            return lm15.ProviderError(f"Gemini sent an answer mk cannot read: {type(exc).__name__}: {exc}"[:2000],
                                      provider=PROVIDER)
        return lm15.ProviderError(f"Gemini call failed: {type(exc).__name__}: {exc}"[:2000], provider=PROVIDER)


def gemini_lm(model: str = "gemini-2.5-pro", *, num_retries: int = 3, cache: bool = True,
              **engine_kwargs: Any) -> Any:
    """A ``dspy.LM`` that talks to Gemini through :class:`GeminiEngine`."""
    import dspy

    name = model if "/" in model else f"{'vertex_ai' if engine_kwargs.get('vertexai') else 'gemini'}/{model}"
    return dspy.LM(name, engine=GeminiEngine(**engine_kwargs), num_retries=num_retries, cache=cache)


# --- translation helpers ------------------------------------------------------
def _model_id(model: str) -> str:
    for prefix in _MODEL_PREFIXES:
        if model.startswith(prefix):
            return model[len(prefix):]
    return model


def _system_text(system: Any) -> str | None:
    if system is None:
        return None
    if isinstance(system, str):
        return system
    return "".join(getattr(p, "text", "") or "" for p in system)


def _content(message: Message) -> Any:
    from google.genai import types

    texts = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ThinkingPart):
            continue  # earlier thinking is not sent back
        else:
            raise lm15.UnsupportedFeatureError(f"mk's Gemini engine sends text only, not {type(part).__name__}",
                                               feature=type(part).__name__)
    text = "".join(texts)
    if message.role == "developer":
        text = f"[developer]\n{text}"
    role = "model" if message.role == "assistant" else "user"
    return types.Content(role=role, parts=[types.Part.from_text(text=text)])


def _thinking(reasoning: Any, agent: AgentSettings, model: str) -> Any:
    from google.genai import types

    gemini3 = model.startswith("gemini-3")
    if reasoning is not None:
        if reasoning.thinking_budget is not None:
            return types.ThinkingConfig(thinking_budget=reasoning.thinking_budget)
        if reasoning.effort == "off":
            return types.ThinkingConfig(thinking_budget=0)
        if gemini3:
            return types.ThinkingConfig(thinking_level="low" if reasoning.effort in ("minimal", "low") else "high")
        return types.ThinkingConfig(thinking_budget=_EFFORT_BUDGET.get(reasoning.effort, 8192))
    if gemini3 and agent.thinking_level:
        return types.ThinkingConfig(thinking_level=agent.thinking_level)
    if not gemini3 and agent.thinking_budget is not None:
        return types.ThinkingConfig(thinking_budget=agent.thinking_budget)
    return None


def _response_format(fmt: Any) -> dict[str, Any]:
    if not fmt:
        return {}
    kind = fmt.get("type")
    if kind == "json_object":
        return {"response_mime_type": "application/json"}
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        return {"response_mime_type": "application/json", **({"response_json_schema": schema} if schema else {})}
    return {}


def _response(raw: Any, model: str) -> Response:
    candidates = getattr(raw, "candidates", None) or []
    if not candidates:
        feedback = getattr(raw, "prompt_feedback", None)
        reason = getattr(feedback, "block_reason", None)
        if reason is not None:
            raise lm15.InvalidRequestError(f"Gemini blocked the prompt ({reason})", provider=PROVIDER)
        raise lm15.ProviderError("Gemini sent an answer mk cannot read: it has no candidates", provider=PROVIDER)
    cand = candidates[0]
    parts: list[Any] = []
    for part in (getattr(cand.content, "parts", None) or []) if cand.content is not None else []:
        if part.text is None:
            continue
        parts.append(ThinkingPart(part.text) if part.thought else TextPart(part.text))
    if not any(isinstance(p, TextPart) for p in parts):
        parts.append(TextPart(""))
    reason = getattr(cand.finish_reason, "name", None) or str(cand.finish_reason or "STOP")
    finish = _FINISH.get(reason, "stop" if reason in ("FINISH_REASON_UNSPECIFIED", "None") else "error")
    meta = getattr(raw, "usage_metadata", None)
    visible = getattr(meta, "candidates_token_count", None) or 0
    thoughts = getattr(meta, "thoughts_token_count", None) or 0
    usage = Usage(input_tokens=getattr(meta, "prompt_token_count", None) or 0, output_tokens=visible + thoughts,
                  total_tokens=getattr(meta, "total_token_count", None),
                  cache_read_tokens=getattr(meta, "cached_content_token_count", None),
                  reasoning_tokens=thoughts or None)
    return Response(id=getattr(raw, "response_id", None) or None, model=getattr(raw, "model_version", None) or model,
                    message=Message.assistant(parts), finish_reason=finish, usage=usage)


def _httpx_kind(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is an httpx (or google-genai's httpx2) error of class ``name`` or a subclass."""
    return any(c.__name__ == name and c.__module__.split(".")[0] in ("httpx", "httpx2") for c in type(exc).__mro__)


def _http_error(code: int, message: str, *, status_name: str | None, retry_after: float | None) -> lm15.LM15Error:
    """The lm15 error for an HTTP status: DSPy retries RateLimit, Server and Timeout errors."""
    kw: dict[str, Any] = {"provider": PROVIDER, "status": code, "provider_code": status_name, "retry_after": retry_after}
    if code in (401, 403):
        return lm15.AuthError(message, env_keys=_ENV_KEYS, **kw)
    if code == 429:
        return lm15.RateLimitError(message, **kw)
    if code in (408, 504):
        return lm15.TimeoutError(message, **kw)
    if code >= 500:
        return lm15.ServerError(message, **kw)
    if 400 <= code < 500:
        return lm15.InvalidRequestError(message, **kw)
    return lm15.ProviderError(message, **kw)


def _retry_after(exc: Any) -> float | None:
    """Seconds from a Retry-After header or a google.rpc.RetryInfo ``retryDelay``."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is not None:
        value = headers.get("retry-after")
        try:
            if value is not None:
                return max(float(value), 0.0)
        except ValueError:
            pass
    details = exc.details if isinstance(getattr(exc, "details", None), dict) else {}
    for item in (details.get("error") or {}).get("details") or []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        match = re.fullmatch(r"\s*([0-9.]+)s\s*", str(delay or ""))
        if match:
            return float(match.group(1))
    return None
