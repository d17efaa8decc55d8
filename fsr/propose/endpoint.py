"""The endpoint a model proposer talks to: its prices, whether it is local, its URL without
credentials, its ceilings as a gate, and a check that it can serve a run at all."""

from __future__ import annotations

import difflib
import re
from urllib.parse import urlsplit

from fsr.config import LLMConfig
from fsr.propose.llm_gate import CallGate

# USD per million tokens (input, output), as published by OpenAI in 2025. The longest matching
# prefix of the model name wins; override with llm.input/output_price_per_mtok.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4.1": (2.0, 8.0), "gpt-4.1-mini": (0.4, 1.6), "gpt-4.1-nano": (0.1, 0.4),
    "gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6), "o3": (2.0, 8.0), "o3-mini": (1.1, 4.4),
    "o4-mini": (1.1, 4.4), "gpt-5": (1.25, 10.0), "gpt-5-mini": (0.25, 2.0), "gpt-5-nano": (0.05, 0.4),
}
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def price_of(model: str, config: LLMConfig, base_url: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens; free on a local server; None if unknown."""
    if config.input_price_per_mtok >= 0 and config.output_price_per_mtok >= 0:
        return config.input_price_per_mtok, config.output_price_per_mtok
    if is_local(base_url):
        return 0.0, 0.0
    matches = [p for p in PRICES if model == p or model.startswith(p + "-")]
    return PRICES[max(matches, key=len)] if matches else None


def is_local(base_url: str) -> bool:
    return bool(base_url) and (urlsplit(base_url).hostname or "") in LOCAL_HOSTS


def safe_url(base_url: str) -> str:
    """The endpoint without credentials embedded in it (user:password@)."""
    return re.sub(r"(://)[^/@\s]+@", r"\1", base_url)


def gate_for(config: LLMConfig, window_s: float = 60.0) -> CallGate:
    """The ceilings of `config`'s endpoint as a gate (share it among the clients of one endpoint)."""
    return CallGate(config.concurrency, config.max_requests_per_minute, config.max_tokens_per_minute, window_s)


class EndpointError(Exception):
    """The endpoint cannot serve a run: it cannot be reached, or it refused the API key. One line."""


def check_endpoint(config: LLMConfig) -> None:
    """Reach the endpoint before a run starts (raises EndpointError), and where it lists its
    models, find the run's among them (a typo in --model would otherwise fail every request of
    the run). A server without a model list (404, 501), or with an empty one, passes: whether it
    serves the model is left to the first request."""
    from fsr.propose.llm_client import list_models  # the client library's seam (it imports this module)
    from fsr.propose.retry import AttemptFailed

    url = safe_url(config.base_url) or "the OpenAI API"
    try:
        listed = list_models(config)
    except AttemptFailed as e:
        if e.kind in ("connection", "timeout"):
            raise EndpointError(f"cannot reach {url}: {e}") from None
        if e.status == 401:
            raise EndpointError(f"{url} refused the API key in {config.api_key_env}") from None
        return  # no list, or not one in OpenAI's shape
    missing = [m for m in run_models(config) if not serves(listed, m)]
    if listed and missing:
        raise EndpointError(f"{url} does not serve {', '.join(repr(m) for m in missing)}: "
                            f"it lists {listed_text(listed, missing[0])}")


def serves(listed: list[str], model: str) -> bool:
    """Whether a model list names `model`: itself, or Ollama's `model:latest` (which Ollama
    serves under the bare name too)."""
    return model in listed or ":" not in model and f"{model}:latest" in listed


def run_models(config: LLMConfig) -> list[str]:
    """The model names a run sends requests for: an ensemble's (`models`), else `model`."""
    from fsr.propose.llm import parse_models

    return [name for name, _ in parse_models(config.models)] or [config.model]


SHOWN_MODELS = 12  # of a long model list (OpenAI's holds about 100), the closest names first


def listed_text(listed: list[str], wanted: str) -> str:
    """The names an endpoint lists, those closest to `wanted` first, at most SHOWN_MODELS."""
    close = difflib.get_close_matches(wanted, listed, n=SHOWN_MODELS, cutoff=0.5)
    shown = (close + [m for m in sorted(listed) if m not in close])[:SHOWN_MODELS]
    more = f" and {len(listed) - len(shown)} more" if len(listed) > len(shown) else ""
    return ", ".join(shown) + more
