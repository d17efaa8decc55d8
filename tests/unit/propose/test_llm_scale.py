"""The model client at scale, against the scripted server: hundreds of requests in flight on one
event-loop thread, an endpoint's ceilings kept at the call level (requests per window, a 429
holding every caller), and `n` learnt per model from the answers, in an ensemble too."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from fsr.candidate import parse
from fsr.config import LLMConfig
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.endpoint import gate_for
from fsr.propose.llm import LLMEnsemble, LLMProposer
from fsr.testing.fakes import softmax_task, timing
from fsr.testing.llm_server import GOOD_KERNEL, ScriptedServer, Slow, StandInEvaluator, Status, fenced, reply
from fsr.types import Evaluation, Verdict

TASK = softmax_task(None)


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server gets the dummy key


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    # The stdlib server's listen backlog is 5: hundreds of connections at once would wait for
    # SYN retries (seconds) before the server saw them.
    monkeypatch.setattr(ThreadingHTTPServer, "request_queue_size", 1024)
    with ScriptedServer() as s:
        yield s


def config(server: ScriptedServer, **kw: Any) -> LLMConfig:
    return replace(LLMConfig(model="scripted-model", base_url=server.base_url, timeout_s=10.0, retries=2,
                             backoff_s=0.02), **kw)


def request(seed: int = 0, n: int = 1, island: int = 0) -> ProposalRequest:
    cand = parse(TASK.baseline_source, TASK)
    parent = Scored(cand, Evaluation(cand.id, TASK.name, Verdict.OK, timing=timing(4650.0), baseline_us=4650.0))
    return ProposalRequest(TASK, (parent,), n=n, seed=seed, island=island)


def kernels(count: int, tag: str = "") -> list[str]:
    return [fenced(GOOD_KERNEL + f"// variant {tag}{i}\n") for i in range(count)]


def test_hundreds_of_requests_in_flight_need_no_thread_each(server: ScriptedServer) -> None:
    server.push(*(Slow(1.0, reply(k)) for k in kernels(300)))
    p = LLMProposer(config(server), device=StandInEvaluator().device())
    before = {t.ident for t in threading.enumerate()}
    started = time.monotonic()
    futures = [p.start(request(seed=i)) for i in range(300)]
    outs = [f.result(timeout=30) for f in futures]
    ours = [t for t in threading.enumerate() if t.ident not in before and "process_request" not in t.name]
    assert sum(len(o.candidates) for o in outs) == 300
    # 1 s each: at least half of them at once, all within 25 s (a loaded two-core machine
    # reached 210; one thread a request would need 300 threads, asserted against below)
    assert server.max_in_flight >= 150 and time.monotonic() - started < 25
    # The request loop and asyncio's resolver pool (at most cores + 4 threads), none per request.
    # (the loop is the process's one: an earlier test may have started it already)
    loops = [t for t in threading.enumerate() if t.name == "fsr-llm-loop"]
    assert len(ours) <= 1 + 32 and len(loops) == 1, [t.name for t in ours]


def test_requests_per_window_are_kept_at_the_call_level(server: ScriptedServer) -> None:
    server.push(*(reply(k) for k in kernels(25)))
    cfg = config(server, max_requests_per_minute=10)
    p = LLMProposer(cfg, device=StandInEvaluator().device(), gate=gate_for(cfg, window_s=3.0))
    outs = [f.result(timeout=30) for f in [p.start(request(seed=i)) for i in range(25)]]
    assert sum(len(o.candidates) for o in outs) == 25
    arrivals = server.arrivals
    assert max(sum(1 for t in arrivals if s <= t < s + 3.0) for s in arrivals) <= 10
    assert arrivals[-1] - arrivals[0] >= 6.0  # 25 requests at 10 a window take two windows at least


def test_a_429_holds_every_caller_for_its_retry_after(server: ScriptedServer) -> None:
    server.push(Status(429, "slow down", retry_after="0.6"), *(reply(k) for k in kernels(3)))
    p = LLMProposer(config(server), device=StandInEvaluator().device())
    first = p.start(request(seed=1))
    while not server.arrivals:
        time.sleep(0.01)
    time.sleep(0.1)  # the 429 is answered
    second = p.start(request(seed=2))
    assert first.result(timeout=10).candidates and second.result(timeout=10).candidates
    assert min(server.arrivals[1:]) >= server.arrivals[0] + 0.55
    throttles = p.client.gate.take_throttles()
    assert [after for _, after in throttles] == [0.6] and p.client.gate.take_throttles() == []


def test_n_is_learnt_per_model_of_an_ensemble(server: ScriptedServer) -> None:
    with ScriptedServer() as ignores_n:
        server.push(reply(*kernels(3, "a")), reply(*kernels(3, "b")))
        ignores_n.push(*(reply(k) for k in kernels(6, "c")))
        device = StandInEvaluator().device()
        honours = LLMProposer(config(server), device=device)
        ignores = LLMProposer(config(ignores_n, model="other-model"), device=device)
        ensemble = LLMEnsemble([honours, ignores], by_island=True)
        assert honours.client.n_honoured is None and ignores.client.n_honoured is None  # not assumed
        for seed in (1, 2):
            assert len(ensemble.start(request(seed, n=3, island=0)).result(timeout=10).candidates) == 3
            assert len(ensemble.start(request(seed, n=3, island=1)).result(timeout=10).candidates) == 3
        assert honours.client.n_honoured is True and len(server.bodies) == 2
        assert all(b.get("n") == 3 for b in server.bodies)
        assert ignores.client.n_honoured is False and len(ignores_n.bodies) == 6  # 1 + 2, then 3 single calls
        assert [b.get("n") for b in ignores_n.bodies] == [3, None, None, None, None, None]
