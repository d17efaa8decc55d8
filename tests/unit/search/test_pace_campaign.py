"""Campaigns paced against a model: fake GPU workers at a fixed evaluation time, the scripted
OpenAI-compatible endpoint answering distinct kernels after a jittered latency, the default
config. Time is scaled down (a 10-s model and 0.4-s evaluations keep their ratio, 25, as 2.5 s
and 0.1 s), and workers must be busy at least 90% of the time once the first requests are answered (before,
nothing but the seeds exists to evaluate, whatever the pacing). A rate-limited endpoint is
kept under its limit with no failed request."""

from __future__ import annotations

import random
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from fsr.config import LLMConfig, SearchConfig
from fsr.evaluate import host
from fsr.propose.endpoint import gate_for
from fsr.propose.llm import LLMProposer
from fsr.search.loop import run_campaign
from fsr.search.pace import Ceilings
from fsr.testing.fake_gpu import FakeGpuWorkers
from fsr.testing.fakes import softmax_task
from fsr.testing.llm_server import GOOD_KERNEL, ScriptedServer, Slow, StandInEvaluator, Status, fenced, reply

DEFAULTS = LLMConfig()


class ModelServer(ScriptedServer):
    """Answers every request with new distinct kernels (as many as `n` asks) after `latency_s`
    times a uniform jitter; with `limit` > 0, a request beyond `limit` in the last `window_s`
    gets a 429 (and is counted in `refused`)."""

    def __init__(self, latency_s: float, jitter: float = 0.3, limit: int = 0, window_s: float = 60.0) -> None:
        super().__init__()
        self.latency_s, self.jitter, self.limit, self.window_s = latency_s, jitter, limit, window_s
        self.refused = 0
        self._made = 0
        self._rng = random.Random(0)
        self._gen = threading.Lock()
        self._recent: list[float] = []
        self._httpd.handle_error = lambda *_: None  # type: ignore[method-assign]  # requests abandoned at the end

    def __enter__(self) -> ModelServer:
        super().__enter__()
        return self

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        with self._gen:
            now = time.monotonic()
            self._recent = [t for t in self._recent if t > now - self.window_s] + [now]
            if self.limit and len(self._recent) > self.limit:
                self.refused += 1
                behaviour: Any = Status(429, "rate limited", retry_after="1")
            else:
                n = int(body.get("n") or 1)
                texts = [fenced(GOOD_KERNEL + f"// variant {self._made + i}\n") for i in range(n)]
                self._made += n
                behaviour = Slow(self.latency_s * self._rng.uniform(1 - self.jitter, 1 + self.jitter), reply(*texts))
        self.push(behaviour)
        return super()._next(body, headers)


@pytest.fixture(autouse=True)
def wide_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stdlib server's listen backlog is 5: hundreds of connections at once would wait for SYN
    # retries (seconds) before it saw them.
    monkeypatch.setattr(ThreadingHTTPServer, "request_queue_size", 1024)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def campaign(server: ModelServer, slots: int, eval_s: float, measure_s: float,
             config: LLMConfig = DEFAULTS, window_s: float = 60.0) -> tuple[FakeGpuWorkers, Any]:
    """A default-config campaign on one task for one latency plus `measure_s` seconds (without the
    wait for comparators at its end: the workers' busy share is measured up to its return)."""
    cfg = LLMConfig(**{**config.__dict__, "model": "scripted-model", "base_url": server.base_url})
    proposer = LLMProposer(cfg, device=StandInEvaluator().device(), gate=gate_for(cfg, window_s))
    executor = FakeGpuWorkers(workers=slots, eval_s=eval_s, calls_per_worker=1, startup_s=0.0)
    search = SearchConfig(max_evaluations=1_000_000, max_wall_s=server.latency_s * 1.3 + measure_s,
                          comparators_wait_s=0)
    pace = Ceilings(cfg.concurrency, cfg.max_requests_per_minute, cfg.max_tokens_per_minute, window_s)
    summary = run_campaign([softmax_task(None)], executor, proposer, search, pace=pace,
                           candidates_per_request=cfg.candidates_per_request)
    return executor, summary


MEASURE_S = 12.0  # the campaign's wall budget past its first answers


@pytest.mark.parametrize(("slots", "eval_s", "latency_s"), [
    (1, 0.1, 2.5),  # a 10-s model, one GPU
    (1, 0.1, 7.5),  # a 30-s model, one GPU
    # a 10-s model, eight GPUs: 40 candidates a second, which a two-core host serves only when
    # nothing else runs (beside one busy core the stand-in model's 5-s answers took 12.5 s)
    pytest.param(8, 0.2, 5.0, marks=pytest.mark.skipif(
        host.cores() < 4, reason="eight stand-in GPUs at 40 candidates a second need four cores")),
])
def test_workers_stay_busy_with_the_default_config(slots: int, eval_s: float, latency_s: float) -> None:
    with ModelServer(latency_s) as server:
        started = time.monotonic()
        executor, summary = campaign(server, slots, eval_s, measure_s=MEASURE_S)
        stopped = time.monotonic()
        first_answer = executor.first_proposed()  # the seed (the baseline) went first
        assert first_answer is not None
        # From when the slowest answers to the first requests are in (before, no pacing can feed
        # the workers: requests sent at once come back over latency +- 30%) to when the wall budget
        # stopped new work (after it, the campaign only winds down: on a busy two-core host that
        # took long enough to count).
        budget_end = started + latency_s * 1.3 + MEASURE_S
        busy = executor.busy(started + latency_s * 1.3, min(stopped, budget_end) - 0.2)
        assert busy >= 0.9, (busy, summary.progress.pace)
        assert server.refused == 0 and summary.progress.proposer_errors == 0
        assert first_answer - started < latency_s * 1.3 + 3.0  # the first requests went out at once (+ imports)
        pace = summary.progress.pace
        assert pace is not None and pace.latency_p50_s is not None
        assert pace.latency_p50_s == pytest.approx(latency_s, rel=0.35)


def test_an_endpoint_limited_to_60_requests_a_minute_is_kept_under_it() -> None:
    # A minute scaled to 6 s: 60 requests a window, far fewer than eight fast workers would use.
    window_s = 6.0
    with ModelServer(1.0, limit=60, window_s=window_s) as server:
        config = LLMConfig(max_requests_per_minute=60)
        executor, summary = campaign(server, 8, 0.05, measure_s=14.0, config=config, window_s=window_s)
        arrivals = server.arrivals
        worst = max(sum(1 for t in arrivals if s <= t < s + window_s) for s in arrivals)
        assert server.refused == 0 and summary.progress.proposer_errors == 0
        assert worst <= 60
        assert len(arrivals) >= 60 * 2  # and it used what the limit allows: two windows' worth at least


def test_one_gpu_worker_at_the_gpus_pace_is_kept_busy_from_the_first_answer() -> None:
    # The shape measured on one H100 (`fsr run --local softmax`, default config): one worker
    # holding one candidate at a time, ~0.6 s an evaluation, the task's two seeds first, after the
    # worker's start-up; a model at 10 s +-30%, unscaled. The start-up once set the pace's
    # evaluation time and starved the worker for tens of seconds, and the waiting seed held back
    # the first requests until the baseline was evaluated.
    with ModelServer(10.0) as server:
        cfg = LLMConfig(model="scripted-model", base_url=server.base_url)
        proposer = LLMProposer(cfg, device=StandInEvaluator().device(), gate=gate_for(cfg))
        executor = FakeGpuWorkers(workers=1, eval_s=0.6, calls_per_worker=1, startup_s=3.0)
        search = SearchConfig(max_evaluations=1_000_000, max_wall_s=30.0)
        pace = Ceilings(cfg.concurrency, cfg.max_requests_per_minute, cfg.max_tokens_per_minute)
        task = softmax_task()
        assert task.template_source  # two seeds: the baseline and the template
        summary = run_campaign([task], executor, proposer, search, pace=pace)
        stopped = time.monotonic()
    first_answer = executor.first_proposed()
    assert first_answer is not None
    busy = executor.busy(first_answer, stopped)
    assert busy >= 0.9, (busy, summary.progress.pace)
    assert summary.progress.proposer_errors == 0
    # The first requests went out at once: the slowest of them is answered by 13 s.
    assert first_answer - executor.started < 10.0 * 1.3 + 0.5
