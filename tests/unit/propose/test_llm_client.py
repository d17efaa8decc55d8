"""The model proposer through the real `openai` client against a scripted local server: replies
to candidates or reasons, n choices, retries and Retry-After, timeouts, dropped connections,
budgets, the API key kept out of the run directory, replay from the cache, ensembles."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from fsr.candidate import parse
from fsr.config import LLMConfig
from fsr.lineage import LineageWriter
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.llm import LLMEnsemble, LLMProposer, make_llm_proposer
from fsr.propose.prompt import build
from fsr.propose.retry import retry_after_s
from fsr.run_json import write_run_json
from fsr.testing.fakes import softmax_task, timing
from fsr.testing.llm_server import (
    EMPTY,
    FAST_KERNEL,
    GOOD_KERNEL,
    Drop,
    EchoKey,
    ScriptedServer,
    Slow,
    StandInEvaluator,
    Status,
    fenced,
    prose_with_blocks,
    reply,
)
from fsr.types import Evaluation, Verdict

KEY_ENV = "FSR_TEST_LLM_KEY"
KEY = "sk-fsr-test-DISTINCTIVE-4f9c2e71"
TASK = softmax_task(None)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def config(server: ScriptedServer, **kw: object) -> LLMConfig:
    values: dict = {"model": "scripted-model", "base_url": server.base_url, "api_key_env": KEY_ENV,
                    "timeout_s": 2.0, "retries": 2, "concurrency": 4, "backoff_s": 0.02} | kw
    return LLMConfig(**values)


def proposer(server: ScriptedServer, **kw: object) -> LLMProposer:
    return LLMProposer(config(server, **kw), device=StandInEvaluator().device())


def baseline() -> Scored:
    cand = parse(TASK.baseline_source, TASK)
    return Scored(cand, Evaluation(cand.id, TASK.name, Verdict.OK, timing=timing(4650.0), baseline_us=4650.0))


def request(n: int = 1, island: int = 0, seed: int = 7) -> ProposalRequest:
    return ProposalRequest(TASK, (baseline(),), n=n, island=island, seed=seed, generation=3,
                           features_wanted=("VEC4",))


# ---- replies -----------------------------------------------------------------------------------

def test_a_good_reply_becomes_a_candidate_with_parents_origin_and_tokens(server: ScriptedServer) -> None:
    server.push(reply(fenced(GOOD_KERNEL)))
    out = proposer(server, temperature=0.5).propose(replace(request(), temperature_scale=2.0))
    assert [c.launches[0].kernel for c in out.candidates] == ["softmax_rows"] and out.errors == ()
    cand = out.candidates[0]
    assert cand.parents == (baseline().id,) and cand.generation == 3
    assert (cand.origin.proposer, cand.origin.model, cand.origin.features_requested) == ("llm", "scripted-model", ("VEC4",))
    assert out.prompt_tokens and out.completion_tokens
    body = server.bodies[0]
    assert body["model"] == "scripted-model" and body["temperature"] == pytest.approx(1.0)
    assert [m["role"] for m in body["messages"]] == ["system", "user"] and "n" not in body


def test_the_prompt_describes_the_device_the_request_names_else_the_proposers_own(server: ScriptedServer) -> None:
    server.push(reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)))
    p = proposer(server)
    own, named = "stand-in H200", "NVIDIA H100 80GB HBM3"
    assert p.device is not None and p.device.name == own
    p.propose(replace(request(), device=replace(p.device, name=named)))
    p.propose(request(seed=3))
    first, second = (json.dumps(body["messages"]) for body in server.bodies)
    assert named in first and own not in first
    assert own in second and named not in second


def test_prose_with_several_blocks_gives_the_kernel(server: ScriptedServer) -> None:
    server.push(reply(prose_with_blocks()))
    out = proposer(server).propose(request())
    assert len(out.candidates) == 1 and out.candidates[0].source == GOOD_KERNEL


def test_n_choices_come_from_one_call_when_the_server_honours_n(server: ScriptedServer) -> None:
    server.push(reply(fenced(GOOD_KERNEL), fenced(FAST_KERNEL)))
    out = proposer(server).propose(request(n=2))
    assert {c.launches[0].kernel for c in out.candidates} == {"softmax_rows", "softmax_fast"}
    assert len(server.bodies) == 1 and server.bodies[0]["n"] == 2


def test_several_calls_are_made_when_the_server_ignores_n_and_that_is_remembered(server: ScriptedServer) -> None:
    server.push(reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)))
    p = proposer(server)
    out = p.propose(request(n=2))
    assert len(out.candidates) == 2 and len(server.bodies) == 2
    assert server.bodies[0]["n"] == 2 and "n" not in server.bodies[1]
    server.push(reply(fenced(GOOD_KERNEL + "// a\n")), reply(fenced(GOOD_KERNEL + "// b\n")))
    out = p.propose(request(n=2, seed=8))
    assert len(out.candidates) == 2 and all("n" not in b for b in server.bodies[2:])


def test_a_server_that_refuses_n_gets_one_sample_per_call(server: ScriptedServer) -> None:
    server.push(Status(400, "n must be 1"), reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)))
    out = proposer(server).propose(request(n=2))
    assert len(out.candidates) == 2 and out.errors == ()
    assert server.bodies[0]["n"] == 2 and all("n" not in b for b in server.bodies[1:])


def test_the_parent_sent_back_unchanged_is_an_error_the_model_hears_about(server: ScriptedServer) -> None:
    server.push(reply(fenced(TASK.baseline_source)), reply(fenced(GOOD_KERNEL)), reply(fenced(GOOD_KERNEL)))
    p = proposer(server)
    out = p.propose(request())
    assert out.candidates == () and out.dropped == 1 and "identical" in out.errors[0]
    p.propose(request())
    assert "identical to the one you were asked to improve" in server.prompts()[1]


def test_garbage_is_an_error_whose_reason_reaches_that_islands_next_prompt(server: ScriptedServer) -> None:
    server.push(reply("I think you should use shared memory."), reply(fenced(GOOD_KERNEL)), reply(fenced(GOOD_KERNEL)))
    p = proposer(server)
    out = p.propose(request(island=0))
    assert out.candidates == () and out.dropped == 1
    assert "no code" in out.errors[0]
    p.propose(request(island=1))
    p.propose(request(island=0))
    other, same = server.prompts()[1], server.prompts()[2]
    assert "could not be used" not in other
    assert "could not be used" in same and "no code" in same and "use shared memory" in same


def test_a_malformed_header_is_an_error_with_the_header_reason(server: ScriptedServer) -> None:
    bad = GOOD_KERNEL.replace('kernel = "softmax_rows"', 'kernel = "softmax_missing"')
    server.push(reply(fenced(bad)), reply(fenced(GOOD_KERNEL)))
    p = proposer(server)
    out = p.propose(request())
    assert out.candidates == () and "header:" in out.errors[0] and "softmax_missing" in out.errors[0]
    p.propose(request())
    assert "softmax_missing" in server.prompts()[1]


def test_empty_choices_are_an_error(server: ScriptedServer) -> None:
    server.push(EMPTY)
    out = proposer(server).propose(request())
    assert out.candidates == () and "no choices" in out.errors[0]
    assert out.prompt_tokens is None


def test_missing_usage_is_estimated_and_marked_in_the_cache(server: ScriptedServer, tmp_path: Path) -> None:
    server.push(reply(fenced(GOOD_KERNEL), usage=False))
    p = LLMProposer(config(server), cache_dir=tmp_path / "llm_cache")
    out = p.propose(request())
    assert out.prompt_tokens and out.prompt_tokens > 1000 and out.completion_tokens
    entries = [json.loads(f.read_text()) for f in (tmp_path / "llm_cache").glob("*.json")]
    assert len(entries) == 1 and entries[0]["tokens_estimated"] is True
    call = json.loads((tmp_path / "llm_cache" / "calls.jsonl").read_text().splitlines()[0])
    assert call["tokens_estimated"] is True and call["prompt_tokens"] == out.prompt_tokens


# ---- retries -----------------------------------------------------------------------------------

def test_429_waits_as_long_as_retry_after_says(server: ScriptedServer) -> None:
    server.push(Status(429, "slow down", retry_after="1"), reply(fenced(GOOD_KERNEL)))
    out = proposer(server).propose(request())
    assert len(out.candidates) == 1
    assert server.arrivals[1] - server.arrivals[0] >= 0.95


def test_5xx_is_retried_then_given_up_with_a_clear_error(server: ScriptedServer) -> None:
    server.push(Status(500), Status(502), Status(503), reply(fenced(GOOD_KERNEL)))
    started = time.monotonic()
    out = proposer(server, retries=2).propose(request())
    assert out.candidates == () and len(server.bodies) == 3
    assert "gave up after 3 attempts: HTTP 503" in out.errors[0]
    assert time.monotonic() - started < 2.0


def test_client_errors_are_not_retried(server: ScriptedServer) -> None:
    server.push(Status(400, "unknown parameter"), reply(fenced(GOOD_KERNEL)))
    out = proposer(server).propose(request())
    assert len(server.bodies) == 1 and "HTTP 400" in out.errors[0] and "not retried" in out.errors[0]
    assert "unknown parameter" in out.errors[0]


def test_a_reply_slower_than_the_timeout_is_retried(server: ScriptedServer) -> None:
    server.push(Slow(3.0), reply(fenced(GOOD_KERNEL)))
    started = time.monotonic()
    out = proposer(server, timeout_s=0.5).propose(request())
    assert len(out.candidates) == 1 and len(server.bodies) == 2
    assert time.monotonic() - started < 2.5


def test_a_slow_server_gives_up_saying_it_timed_out(server: ScriptedServer) -> None:
    server.push(Slow(3.0), Slow(3.0))
    out = proposer(server, timeout_s=0.3, retries=1).propose(request())
    assert out.candidates == () and "gave up after 2 attempts: no reply within 0.3 s" in out.errors[0]


def test_a_dropped_connection_is_retried_and_then_reported(server: ScriptedServer) -> None:
    server.push(Drop(), reply(fenced(GOOD_KERNEL)))
    assert len(proposer(server).propose(request()).candidates) == 1
    server.push(Drop(), Drop(), Drop())
    out = proposer(server, retries=2).propose(request(seed=9))
    assert out.candidates == () and "gave up after 3 attempts: connection failed" in out.errors[0]


def test_a_retry_after_beyond_max_wait_gives_up_at_once(server: ScriptedServer) -> None:
    server.push(Status(429, "quota", retry_after="3600"), reply(fenced(GOOD_KERNEL)))
    out = proposer(server).propose(request())
    assert len(server.bodies) == 1 and "3600 s" in out.errors[0] and "max_wait_s" in out.errors[0]


def test_retry_after_is_read_in_seconds_milliseconds_and_http_dates() -> None:
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after": "0.5"}) == 0.5
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_s({"retry-after": when}) or 0) <= 31
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert retry_after_s({"retry-after": past}) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None


def test_concurrent_calls_stay_within_the_limit(server: ScriptedServer) -> None:
    server.push(*(Slow(0.3, reply(fenced(GOOD_KERNEL + f"// {i}\n"))) for i in range(4)))
    p = proposer(server, concurrency=2)
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:  # as the loop's proposal threads call it
        outs = list(pool.map(p.propose, [request(seed=s) for s in range(4)]))
    assert sum(len(o.candidates) for o in outs) == 4 and len(server.bodies) == 4
    assert server.max_in_flight == 2 and time.monotonic() - started >= 0.55


# ---- keys and budgets --------------------------------------------------------------------------

def test_the_api_key_is_sent_but_never_written_to_the_run_directory(server: ScriptedServer, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    cfg = config(server)
    p = make_llm_proposer(cfg, run)
    server.push(EchoKey(), reply(fenced(GOOD_KERNEL)))
    refused = p.propose(request())
    assert "HTTP 401" in refused.errors[0] and KEY not in refused.errors[0] and "***" in refused.errors[0]
    out = p.propose(request(seed=11))
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    write_run_json(run, {"llm": cfg.__dict__, "errors": list(refused.errors)})
    with LineageWriter(run) as writer:
        cand = out.candidates[0]
        writer.append(cand, StandInEvaluator().evaluate(cand), prompt_tokens=out.prompt_tokens)
    files = [f for f in run.rglob("*") if f.is_file()]
    assert any(f.suffix == ".parquet" for f in files) and any(f.name == "calls.jsonl" for f in files)
    for f in files:
        assert KEY.encode() not in f.read_bytes(), f
    assert KEY not in repr(p) and KEY not in repr(p.client)  # type: ignore[union-attr]


def test_a_remote_endpoint_without_a_key_is_refused_and_a_local_one_gets_a_dummy(
        server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=KEY_ENV):
        LLMProposer(LLMConfig(model="gpt-4.1", base_url="https://llm.example.invalid/v1", api_key_env=KEY_ENV))
    server.push(reply(fenced(GOOD_KERNEL)))
    assert len(proposer(server).propose(request()).candidates) == 1
    assert server.headers[0]["authorization"] == "Bearer none"


def worst_tokens(p: LLMProposer, req: ProposalRequest) -> int:
    """What the client reserves for one call of `req` before the server has reported usage."""
    messages = build(req, p.device, (), p.config.prompt_budget_tokens).as_dicts()
    return p.meter.prompt_bound(sum(len(m["content"].encode()) for m in messages), len(messages)) \
        + req.n * p.config.max_tokens


def test_a_token_budget_smaller_than_a_calls_worst_case_makes_no_call(server: ScriptedServer) -> None:
    server.push(reply(fenced(GOOD_KERNEL)))
    p = proposer(server, max_total_tokens=100)
    out = p.propose(request())
    assert out.candidates == () and "budget spent" in out.errors[0] and p.exhausted
    assert server.bodies == [] and p.meter.tokens == 0


def test_a_token_budget_is_never_overrun_by_calls_in_flight(server: ScriptedServer) -> None:
    server.push(*(Slow(0.2, reply(fenced(GOOD_KERNEL + f"// {i}\n"))) for i in range(8)))
    p = proposer(server)
    budget = worst_tokens(p, request()) + 3_000  # one worst case, then room for what calls really use
    p = proposer(server, max_total_tokens=budget)
    with ThreadPoolExecutor(8) as pool:  # without reservations, all 8 would be sent at once
        outs = list(pool.map(p.propose, [request(seed=s) for s in range(8)]))
    made = sum(len(o.candidates) for o in outs)
    assert 2 <= made < 8 and len(server.bodies) == made and server.max_in_flight < made
    assert p.meter.tokens <= budget and p.exhausted
    assert any("budget spent" in e for o in outs for e in o.errors)


def test_a_money_budget_uses_the_price_table_and_reserves_the_worst_case(server: ScriptedServer) -> None:
    server.push(reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)))
    prices = {"input_price_per_mtok": 2.0, "output_price_per_mtok": 8.0}
    p = proposer(server, **prices)
    worst = worst_tokens(p, request()) * 8.0 / 1e6  # every token priced as output: above the worst cost
    p = proposer(server, max_cost=worst, **prices)
    p.propose(request())
    assert 0 < p.meter.cost_usd < worst  # ~2000 prompt tokens at $2/M and ~900 completion at $8/M
    out = p.propose(request(seed=13))
    assert p.meter.cost_usd <= worst and len(server.bodies) <= 2
    if len(server.bodies) == 1:
        assert "budget spent" in out.errors[0]


def test_a_money_budget_for_a_model_of_unknown_price_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="price"):
        LLMProposer(LLMConfig(model="my-finetune", base_url="https://llm.example.invalid/v1", api_key_env=KEY_ENV,
                              max_cost=5.0))
    known = LLMProposer(LLMConfig(model="gpt-4.1-2025-04-14", api_key_env=KEY_ENV, max_cost=5.0))
    assert known.client.price == (2.0, 8.0)


# ---- replay ------------------------------------------------------------------------------------

def test_replay_reproduces_a_runs_proposals_without_a_server(tmp_path: Path) -> None:
    first, second = tmp_path / "runs" / "first", tmp_path / "runs" / "second"
    requests = [request(seed=1), request(seed=1), request(n=2, island=2, seed=2)]
    with ScriptedServer() as server:
        server.push(reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)),
                    reply(fenced(GOOD_KERNEL + "// x\n"), fenced(GOOD_KERNEL + "// y\n")))
        live = make_llm_proposer(config(server), first)
        recorded = [live.propose(r) for r in requests]
        dead_url = server.base_url
    assert [len(r.candidates) for r in recorded] == [1, 1, 2]
    cfg = LLMConfig(model="scripted-model", base_url=dead_url, api_key_env=KEY_ENV, timeout_s=0.5, retries=0,
                    backoff_s=0.02)
    again = make_llm_proposer(cfg, second, replay=first)
    replayed = [again.propose(r) for r in requests]
    assert [[c.id for c in r.candidates] for r in replayed] == [[c.id for c in r.candidates] for r in recorded]
    assert [(r.prompt_tokens, r.completion_tokens) for r in replayed] == \
        [(r.prompt_tokens, r.completion_tokens) for r in recorded]
    miss = again.propose(ProposalRequest(TASK, (baseline(),), seed=4))  # a prompt the first run never sent
    assert miss.candidates == () and "replay: no cached reply" in miss.errors[0]
    assert len(list((second / "llm_cache").glob("*.json"))) == 4  # the replayed run is self-contained


# ---- ensembles ---------------------------------------------------------------------------------

def test_an_ensemble_picks_a_model_per_island_or_by_seeded_weights(server: ScriptedServer) -> None:
    a = proposer(server, model="model-a")
    b = proposer(server, model="model-b")
    by_island = LLMEnsemble([a, b], by_island=True)
    assert by_island.pick(request(island=0)) is a and by_island.pick(request(island=3)) is b
    weighted = LLMEnsemble([a, b], weights=[0.0, 1.0])
    assert all(weighted.pick(request(seed=s)) is b for s in range(20))
    even = LLMEnsemble([a, b])
    assert {even.pick(request(seed=s)).config.model for s in range(40)} == {"model-a", "model-b"}
    assert [even.pick(request(seed=s)) for s in range(10)] == [even.pick(request(seed=s)) for s in range(10)]
    server.push(reply(fenced(GOOD_KERNEL)))
    out = by_island.propose(request(island=1))
    assert server.bodies[0]["model"] == "model-b" and out.candidates[0].origin.model == "model-b"


def test_make_llm_proposer_builds_an_ensemble_sharing_one_budget(server: ScriptedServer) -> None:
    ens = make_llm_proposer(config(server, models="model-a=3, model-b", max_total_tokens=50))
    assert isinstance(ens, LLMEnsemble) and [m.config.model for m in ens.members] == ["model-a", "model-b"]
    assert ens.weights == (3.0, 1.0) and ens.members[0].meter is ens.members[1].meter
    server.push(reply(fenced(GOOD_KERNEL)))
    ens.members[0].propose(request())
    assert ens.exhausted and "budget spent" in ens.members[1].propose(request()).errors[0]


def test_importing_the_proposer_loads_neither_the_client_nor_cuda_nor_ray() -> None:
    code = ("import sys, fsr.propose.llm, fsr.search.fsr_strategy; "
            "print(sorted(m for m in ('openai', 'cupy', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_endpoint_check_refuses_an_unreachable_server_and_passes_one_without_a_model_list():
    import socket

    from fsr.propose.endpoint import EndpointError, check_endpoint

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EndpointError, match=f"cannot reach http://127.0.0.1:{port}"):
        check_endpoint(LLMConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1"))
    with ScriptedServer() as server:  # GET /models: 501, left to the first request
        check_endpoint(LLMConfig(model="m", base_url=server.base_url))
