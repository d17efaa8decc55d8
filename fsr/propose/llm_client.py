"""Chat completions against any OpenAI-compatible endpoint, with what a long search needs around
them: hundreds of calls in flight as coroutines on one thread (fsr.propose.llm_gate), the
endpoint's ceilings, retries that honour Retry-After (fsr.propose.retry), token and money
budgets that calls in flight cannot overrun, and a response cache under the run directory that
lets a run be replayed without the endpoint (fsr.propose.endpoint: its prices, its check).

This is the one module that imports `openai` (lazily, where a call is made): the retries
(fsr.propose.retry) and the endpoint's check (fsr.propose.endpoint) see its errors as
fsr.propose.retry.AttemptFailed, so a change of client library stays here.

The API key is read from the environment variable the config names, handed to the `openai`
client, and nowhere else: it is never stored in a cache entry, a log line or a repr, and it is
scrubbed from error texts (some servers echo it back).

Cache layout (`<run>/llm_cache/`): one JSON file per sample, named by a hash of (model, sha256
of the prompt messages, sample index), written atomically; `prompts/<sha256>.json` holds each
distinct prompt once; `calls.jsonl` has one line per call (tokens, cost, whether estimated or
cached, retries, error). The sample index is the ordinal of a sample among all samples this
client drew for the same model and prompt, so repeated prompts get fresh samples live and the
same ones again on replay.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fsr.config import LLMConfig
from fsr.propose.endpoint import gate_for, is_local, price_of, safe_url
from fsr.propose.llm_cache import ResponseCache, Sample, prompt_sha
from fsr.propose.llm_gate import CallGate, Meter, Reservation, submit
from fsr.propose.prompt import estimate_tokens
from fsr.propose.retry import THROTTLES, AttemptFailed, CallFailed, sending, with_retries

# OpenAI reasoning models take max_completion_tokens and no temperature.
REASONING = re.compile(r"^(o\d|gpt-5)")
SHARD_CONNECTIONS = 32  # keep-alive connections of one HTTP client (see ChatClient._connect)
BUDGET_POLL_S = 0.05  # how often a call whose worst case does not fit yet looks again


@dataclass(frozen=True)
class Completion:
    """What one `complete` produced: samples, and a reason for each sample it could not get."""

    samples: tuple[Sample, ...]
    errors: tuple[str, ...]
    throttles: tuple[float | None, ...] = ()  # the Retry-After of each 429 met (None: unsaid)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.samples)

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion_tokens for s in self.samples)


class ChatClient:
    """One model at one endpoint. Thread-safe; its calls run on the process's model-request loop
    (fsr.propose.llm_gate.submit), at most `config.concurrency` in flight per endpoint gate.

    `cache`: where samples are written (and, live, read first: a resumed run gets the answers it
    already paid for). `replay_from`: a cache to serve from instead of the endpoint; a sample it
    lacks is an error, and no network call is ever made. `gate`: the endpoint's ceilings, shared
    by the clients of one endpoint (an ensemble's models).
    """

    def __init__(self, config: LLMConfig, *, cache: ResponseCache | None = None,
                 replay_from: ResponseCache | None = None, meter: Meter | None = None,
                 gate: CallGate | None = None) -> None:
        self.config = config
        self.model = config.model
        self.cache, self.replay_from = cache, replay_from
        self.meter = meter or Meter(config.max_cost, config.max_total_tokens)
        self.gate = gate or gate_for(config)
        self.price = price_of(config.model, config, config.base_url)
        if self.meter.max_cost and self.price is None and replay_from is None:
            raise ValueError(f"max_cost is set but the price of model {config.model!r} is unknown: set "
                             "llm.input_price_per_mtok and llm.output_price_per_mtok")
        self._lock = threading.Lock()
        self._ordinals: Counter[str] = Counter()
        self.n_honoured: bool | None = None  # learnt from answers: does the server return n choices?
        self._key = "" if replay_from is not None else self._api_key()
        self._clients: list[Any] = []  # AsyncOpenAI clients, made on the request loop's thread
        self._busy: list[int] = []  # calls in flight on each
        self._tls: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        mode = "replay" if self.replay_from is not None else "live"
        return f"ChatClient(model={self.model!r}, base_url={safe_url(self.config.base_url)!r}, {mode})"

    def _api_key(self) -> str:
        key = os.environ.get(self.config.api_key_env, "")
        if not key:
            if self.config.base_url and is_local(self.config.base_url):
                return "none"  # local servers (vLLM, SGLang, Ollama) take any key
            raise ValueError(f"no API key: set the environment variable {self.config.api_key_env} "
                             f"(llm.api_key_env) for {self.config.base_url or 'the OpenAI API'}")
        return key

    def _connect(self) -> Any:
        """An AsyncOpenAI client for one call: the least busy of a few, each with a keep-alive
        pool of at most SHARD_CONNECTIONS. (httpcore looks at every pooled connection for every
        request it sends, so one pool of hundreds costs milliseconds of CPU a request.)"""
        import openai

        shards = max(1, -(-max(1, self.config.concurrency) // SHARD_CONNECTIONS))
        if len(self._clients) < shards and (not self._clients or min(self._busy) > 0):
            size = min(SHARD_CONNECTIONS, max(1, self.config.concurrency))
            limits = type(openai.DEFAULT_CONNECTION_LIMITS)(max_connections=size, max_keepalive_connections=size)
            if self._tls is None:
                self._tls = ssl.create_default_context()  # loading the CA store takes 0.2 s: once
            http = openai.DefaultAsyncHttpxClient(limits=limits, timeout=self.config.timeout_s, verify=self._tls,
                                                  event_hooks={"request": [sending]})
            self._clients.append(openai.AsyncOpenAI(base_url=self.config.base_url or None, api_key=self._key,
                                                    timeout=self.config.timeout_s, max_retries=0,
                                                    http_client=http))
            self._busy.append(0)
        return min(range(len(self._clients)), key=self._busy.__getitem__)

    # ---- the public calls -----------------------------------------------------------------------

    def complete(self, messages: Sequence[Mapping[str, str]], n: int, temperature: float,
                 seed: int = 0) -> Completion:
        """`n` samples for these messages, waiting for them (see `complete_async`)."""
        return self.start(messages, n, temperature, seed).result()

    def start(self, messages: Sequence[Mapping[str, str]], n: int, temperature: float,
              seed: int = 0) -> Future[Completion]:
        """`complete_async` started on the request loop; returns at once."""
        return submit(self.complete_async(messages, n, temperature, seed))

    async def complete_async(self, messages: Sequence[Mapping[str, str]], n: int, temperature: float,
                             seed: int = 0) -> Completion:
        """`n` samples for these messages: from the cache where present, else from the endpoint
        (one call with `n` choices where the server honours it, else several calls). Never raises
        for an endpoint's failure: each missing sample has a reason in `errors`."""
        sha = prompt_sha(messages)
        throttles: list[float | None] = []
        THROTTLES.set(throttles)  # this task's calls (and the per-sample ones it gathers) add to it
        with self._lock:
            start = self._ordinals[sha]
            self._ordinals[sha] += n
        indices = list(range(start, start + n))
        got: dict[int, Sample] = {}
        source = self.replay_from if self.replay_from is not None else self.cache
        for i in indices:
            hit = source.get(self.model, sha, i) if source is not None else None
            if hit is not None:
                got[i] = hit
        missing = [i for i in indices if i not in got]
        errors: list[str] = []
        if missing and self.replay_from is not None:
            errors.append(f"replay: no cached reply for model {self.model!r}, prompt {sha[:12]}, sample(s) "
                          f"{missing}: this run asked something the recorded run did not")
        elif missing:
            if refusal := self.meter.refusal():
                errors.append(refusal)
            else:
                fetched, call_errors = await self._fetch(messages, sha, missing, temperature, seed)
                got.update(fetched)
                errors += call_errors
        if self.cache is not None:  # fsynced files: written off the request loop's thread
            await asyncio.to_thread(self._store, self.cache, sha, messages, got, errors)
        return Completion(tuple(got[i] for i in indices if i in got), tuple(self._redact(e) for e in errors),
                          tuple(throttles))

    def _store(self, cache: ResponseCache, sha: str, messages: Sequence[Mapping[str, str]], got: dict[int, Sample],
               errors: list[str]) -> None:
        cache.put_prompt(sha, messages)
        for s in got.values():
            if not s.cached or self.replay_from is not None:
                cache.put(self.model, sha, s)
        if self.replay_from is not None:
            cache.log({"model": self.model, "prompt_sha256": sha, "samples": sorted(got),
                       "cached": True, "error": "; ".join(errors) or None})

    # ---- calls ----------------------------------------------------------------------------------

    async def _fetch(self, messages: Sequence[Mapping[str, str]], sha: str, indices: list[int], temperature: float,
                     seed: int) -> tuple[dict[int, Sample], list[str]]:
        """Several choices in one call until the server shows it ignores or refuses `n` (fewer
        choices than asked, or HTTP 400 for a call asking several); then one call per choice,
        all in flight at once."""
        got: dict[int, Sample] = {}
        errors: list[str] = []
        rest = indices
        if len(indices) > 1 and self.n_honoured is not False:
            try:
                samples = await self._call(messages, sha, indices, temperature, seed)
            except CallFailed as e:
                if not str(e).startswith("HTTP 400"):
                    return {}, [f"samples {indices}: {e}"]
                samples = []  # a server that refuses n > 1: one sample per call from now on
                self.n_honoured = False
            got.update({s.index: s for s in samples})
            if 0 < len(samples) < len(indices):
                self.n_honoured = False  # the server ignores n: one sample per call from now on
            elif len(samples) == len(indices):
                self.n_honoured = True
            rest = [i for i in indices if i not in got] if samples or self.n_honoured is False else []
            if not rest and not samples:
                errors.append(f"samples {indices}: the server returned no choices")
        if rest:
            results = await asyncio.gather(*(self._call(messages, sha, [i], temperature, seed) for i in rest),
                                           return_exceptions=True)
            for i, result in zip(rest, results, strict=True):
                if isinstance(result, CallFailed):
                    errors.append(f"sample {i}: {result}")
                elif isinstance(result, BaseException):
                    raise result
                elif result:
                    got[i] = result[0]
                else:
                    errors.append(f"sample {i}: the server returned no choices")
        return got, errors

    async def _call(self, messages: Sequence[Mapping[str, str]], sha: str, indices: list[int], temperature: float,
                    seed: int) -> list[Sample]:
        """One request for len(indices) choices, retried, within the budget (its worst case
        reserved first) and the endpoint's ceilings; raises CallFailed."""
        kwargs = self._arguments(messages, len(indices), temperature, seed + indices[0])
        prompt_bytes = sum(len(m["content"].encode()) for m in messages)
        prompt_bound = self.meter.prompt_bound(prompt_bytes, len(messages))
        worst_tokens = prompt_bound + len(indices) * self.config.max_tokens
        price = self.price or (0.0, 0.0)
        worst = Reservation(worst_tokens, (prompt_bound * price[0] + len(indices) * self.config.max_tokens
                                           * price[1]) / 1e6)
        while (reserved := self.meter.reserve(worst)) is None:
            await asyncio.sleep(BUDGET_POLL_S)  # calls in flight may settle for less than their worst
        if isinstance(reserved, str):
            raise CallFailed(reserved)
        started = time.perf_counter()
        samples: list[Sample] = []
        try:
            response, attempts = await with_retries(self._send, kwargs, self.config, self.gate, worst_tokens,
                                                    prompt_bound, self._redact)
            choices = sorted(response.choices or [], key=lambda c: c.index or 0)[: len(indices)]
            samples = self._samples(messages, response, choices, indices)
        except CallFailed as e:
            self._log(sha, indices, None, started, e.attempts, str(e))
            raise
        finally:
            used = sum(s.prompt_tokens + s.completion_tokens for s in samples)
            self.meter.settle(reserved, used, self._cost(samples))
        if samples and not samples[0].estimated:
            self.meter.learn(prompt_bytes, samples[0].prompt_tokens)
        self._log(sha, indices, samples, started, attempts, None)
        return samples

    async def _send(self, kwargs: dict[str, Any]) -> Any:
        """One attempt of a call, on the least busy HTTP client; raises AttemptFailed."""
        import openai

        shard = self._connect()
        self._busy[shard] += 1
        try:
            return await self._clients[shard].chat.completions.create(**kwargs)
        except (openai.OpenAIError, ValueError, TypeError) as e:  # ValueError, TypeError: an unreadable response
            raise failure(e) from None
        finally:
            self._busy[shard] -= 1

    def _arguments(self, messages: Sequence[Mapping[str, str]], n: int, temperature: float,
                   seed: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if REASONING.match(self.model):
            kwargs["max_completion_tokens"] = self.config.max_tokens
        else:
            kwargs["max_tokens"] = self.config.max_tokens
            kwargs["temperature"] = temperature
        if n > 1:
            kwargs["n"] = n
        if self.config.send_seed:
            kwargs["seed"] = seed % 2**31
        return kwargs

    def _samples(self, messages: Sequence[Mapping[str, str]], response: Any, choices: list[Any],
                 indices: list[int]) -> list[Sample]:
        texts = [(c.message.content or "") if c.message is not None else "" for c in choices]
        usage: Any = getattr(response, "usage", None)
        estimated = usage is None or usage.prompt_tokens is None
        if estimated:
            prompt = sum(estimate_tokens(m["content"]) for m in messages)
            completion = [estimate_tokens(t) for t in texts]
        else:
            prompt = int(usage.prompt_tokens)
            total = int(usage.completion_tokens or 0)
            share = total // max(1, len(texts))
            completion = [total - share * (len(texts) - 1)] + [share] * (len(texts) - 1) if texts else []
        return [Sample(i, t, c.finish_reason, prompt if k == 0 else 0, completion[k], estimated)
                for k, (i, t, c) in enumerate(zip(indices, texts, choices, strict=False))]

    def _cost(self, samples: Sequence[Sample]) -> float:
        if self.price is None:
            return 0.0
        return sum(s.prompt_tokens * self.price[0] + s.completion_tokens * self.price[1] for s in samples) / 1e6

    def _log(self, sha: str, indices: list[int], samples: list[Sample] | None, started: float,
             attempts: int, error: str | None) -> None:
        if self.cache is None:
            return
        samples = samples or []
        prompt = sum(s.prompt_tokens for s in samples)
        completion = sum(s.completion_tokens for s in samples)
        cost = (prompt * self.price[0] + completion * self.price[1]) / 1e6 if self.price else None
        self.cache.log({"model": self.model, "prompt_sha256": sha, "samples": [s.index for s in samples],
                        "asked": indices, "prompt_tokens": prompt, "completion_tokens": completion,
                        "tokens_estimated": any(s.estimated for s in samples), "cost_usd": cost,
                        "seconds": round(time.perf_counter() - started, 3), "attempts": attempts,
                        "cached": False, "error": self._redact(error) if error else None})

    def _redact(self, text: str) -> str:
        key = self._key
        if len(key) >= 4 and key != "none":
            text = text.replace(key, "***")
        return text


# ---- the client library's errors, and the endpoint's model list ----------------------------------

def failure(e: Exception) -> AttemptFailed:
    """An error of the `openai` client (or of reading its response) as fsr's AttemptFailed."""
    import openai

    if isinstance(e, openai.APIStatusError):
        return AttemptFailed("status", _status_text(e), e.status_code, e.response.headers)
    if isinstance(e, openai.APITimeoutError):  # before APIConnectionError, its base class
        return AttemptFailed("timeout", str(e))
    if isinstance(e, openai.APIConnectionError):
        return AttemptFailed("connection", str(e.__cause__ or e))
    return AttemptFailed("bad", f"{type(e).__name__}: {e}")


def list_models(config: LLMConfig) -> list[str]:
    """The models the endpoint lists (one call, no retry, at most 10 s); raises AttemptFailed."""
    import openai

    client = openai.OpenAI(base_url=config.base_url or None, api_key=os.environ.get(config.api_key_env) or "none",
                           timeout=min(config.timeout_s, 10.0), max_retries=0)
    try:
        return [m.id for m in client.models.list().data]
    except (openai.OpenAIError, ValueError, TypeError, AttributeError) as e:  # the last three: not OpenAI's shape
        raise failure(e) from None


def _status_text(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:500]
    return str(getattr(e, "message", e))[:500]
