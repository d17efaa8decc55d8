"""The language-model proposer: a prompt from the request, samples from a chat model, candidates
from the replies.

`LLMProposer` is one model behind one OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama
...). `LLMEnsemble` is several, one chosen per request (by seeded weights, or by island), and it
is what the island loop gets when islands should use different models: the loop sees a single
Proposer. `make_llm_proposer` builds either from the config.

Feedback: failed evaluations reach the prompt through `request.failures` (the loop's islands
keep them). Replies that never became candidates (no code, a cut-off block, a malformed header)
never reach an evaluator, so the proposer keeps them itself: a small memory per (task, island)
of recent reply errors, shown in that island's next prompt and then forgotten. They are also
returned in `Proposals.errors`.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from fsr.candidate import HeaderError, parse
from fsr.config import LLMConfig
from fsr.propose import reply
from fsr.propose.base import ProposalRequest, Proposals, ProposerTraits
from fsr.propose.endpoint import gate_for, safe_url
from fsr.propose.features import NAMES
from fsr.propose.llm_cache import ResponseCache, Sample
from fsr.propose.llm_client import ChatClient
from fsr.propose.llm_gate import CallGate, Meter, submit
from fsr.propose.prompt import build
from fsr.types import Candidate, DeviceInfo, Origin, Task

REPLY_ERRORS_KEPT = 4
CACHE_DIR = "llm_cache"


class ReplyMemory:
    """Recent reasons why replies could not be used, per (task, island); shared by an ensemble so
    the next prompt of an island carries them whichever model writes it."""

    def __init__(self, keep: int = REPLY_ERRORS_KEPT) -> None:
        self.keep = keep
        self._errors: dict[tuple[str, int], deque[str]] = {}
        self._lock = threading.Lock()

    def add(self, task: str, island: int, errors: Sequence[str]) -> None:
        if errors:
            with self._lock:
                self._errors.setdefault((task, island), deque(maxlen=self.keep)).extend(errors)

    def take(self, task: str, island: int) -> tuple[str, ...]:
        """The remembered errors of an island, oldest first; they are forgotten once taken."""
        with self._lock:
            found = self._errors.pop((task, island), None)
        return tuple(found or ())


class LLMProposer:
    """Proposes candidates with one chat model (`proposer = "llm"`); see the module docstring."""

    name = "llm"

    def __init__(self, config: LLMConfig, *, device: DeviceInfo | None = None,
                 cache_dir: str | Path | None = None, replay_from: str | Path | None = None,
                 meter: Meter | None = None, memory: ReplyMemory | None = None,
                 gate: CallGate | None = None) -> None:
        """`cache_dir` receives every sample (and serves a resumed run); `replay_from` is a cache
        directory to serve from instead of the endpoint (no network at all); `device` is the GPU
        a prompt describes when its request names none."""
        if not config.model:
            raise ValueError("llm.model is empty: name the model to use (or use the offline mutator)")
        self.config = config
        self.device = device
        self.client = ChatClient(config, cache=ResponseCache(cache_dir) if cache_dir else None,
                                 replay_from=ResponseCache(replay_from) if replay_from else None, meter=meter,
                                 gate=gate)
        self.memory = memory or ReplyMemory()

    def __repr__(self) -> str:
        return f"LLMProposer(model={self.config.model!r}, base_url={safe_url(self.config.base_url)!r})"

    @property
    def meter(self) -> Meter:
        return self.client.meter

    @property
    def exhausted(self) -> bool:
        """True once the token or money budget is spent: no further call will be made."""
        return self.meter.refusal() is not None

    def describe(self, task: Task) -> ProposerTraits:
        """First kernels from the task's description, signature and reference; every feature of
        the catalogue; the spent budget as the hint, if that is why nothing new came."""
        return _traits(self.meter, self.config.temperature, self.config.model)

    def propose(self, request: ProposalRequest) -> Proposals:
        """Up to `request.n` candidates, one per sample that holds a valid kernel. Endpoint
        failures and unusable replies are returned in `errors`, never raised."""
        return self.start(request).result()

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        """`propose`, returning at once: the prompt is built now, from the request as it stands
        (late binding: a request is built when it is sent, never queued), and the call and the
        reading of its replies run on the model-request loop, not on a thread of their own."""
        shown = self.memory.take(request.task.name, request.island)
        prompt = build(request, request.device or self.device, shown, self.config.prompt_budget_tokens,
                       diagnostics=shows_diagnostics(self.config, request.island))
        temperature = self.config.temperature * request.temperature_scale
        return submit(self._answer(request, prompt.as_dicts(), shown, temperature))

    async def _answer(self, request: ProposalRequest, messages: list[dict[str, str]], shown: tuple[str, ...],
                      temperature: float) -> Proposals:
        task = request.task
        completion = await self.client.complete_async(messages, request.n, temperature, request.seed)
        if not completion.samples:
            self.memory.add(task.name, request.island, shown)  # never reached a model: keep them
        candidates: list[Candidate] = []
        errors = list(completion.errors)
        unusable: list[str] = []  # the model's mistakes: remembered for this island's next prompt
        parents = {p.id for p in request.parents}
        for sample in completion.samples:
            made = self._candidate(sample, request)
            if isinstance(made, Candidate) and made.id in parents:
                made = "the kernel is identical to the one you were asked to improve: change something that matters"
            if isinstance(made, str):
                errors.append(f"sample {sample.index}: {made}")
                unusable.append(f"{made} (your reply began: \"{reply.excerpt(sample.text, 160)}\")")
            elif any(c.id == made.id for c in candidates):
                errors.append(f"sample {sample.index}: the same kernel as an earlier sample of this request")
            else:
                candidates.append(made)
        self.memory.add(task.name, request.island, unusable)
        return Proposals(tuple(candidates), dropped=len(completion.samples) - len(candidates), errors=tuple(errors),
                         prompt_tokens=completion.prompt_tokens if completion.samples else None,
                         completion_tokens=completion.completion_tokens if completion.samples else None,
                         throttles=completion.throttles)

    def _candidate(self, sample: Sample, request: ProposalRequest) -> Candidate | str:
        """A candidate from one sample, or the reason there is none."""
        extracted = reply.extract(sample.text, sample.finish_reason)
        if extracted.source is None:
            return extracted.reason
        origin = Origin(proposer=self.name, model=self.config.model,
                        features_requested=request.features_requested, move="write" if request.first else "rewrite")
        try:
            cand = parse(extracted.source, request.task, origin)
        except HeaderError as e:
            return f"header: {e}"
        return replace(cand, parents=tuple(p.id for p in request.parents), island=request.island,
                       generation=request.generation)


class LLMEnsemble:
    """Several LLMProposers; each request goes to one: by island (island i to member i mod count)
    or at random by weight, seeded by the request's seed (so a rerun picks the same)."""

    name = "llm"

    def __init__(self, members: Sequence[LLMProposer], weights: Sequence[float] | None = None,
                 by_island: bool = False) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = tuple(members)
        self.weights = tuple(weights) if weights else (1.0,) * len(self.members)
        if len(self.weights) != len(self.members) or min(self.weights) < 0 or not sum(self.weights):
            raise ValueError("ensemble weights: one non-negative weight per model, not all zero")
        self.by_island = by_island

    def __repr__(self) -> str:
        return f"LLMEnsemble({', '.join(m.config.model for m in self.members)})"

    @property
    def exhausted(self) -> bool:
        return all(m.exhausted for m in self.members)

    def describe(self, task: Task) -> ProposerTraits:
        """As a member's, naming every model in the hint (the members share one budget)."""
        first = self.members[0]
        return _traits(first.meter, first.config.temperature, ", ".join(m.config.model for m in self.members))

    def pick(self, request: ProposalRequest) -> LLMProposer:
        if self.by_island:
            return self.members[request.island % len(self.members)]
        return random.Random(request.seed).choices(self.members, weights=self.weights)[0]

    def propose(self, request: ProposalRequest) -> Proposals:
        return self.pick(request).propose(request)

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        return self.pick(request).start(request)


def shows_diagnostics(config: LLMConfig, island: int) -> bool:
    """Whether an island's prompts carry the diagnostics (`llm.diagnostics`, alternating by
    island with `llm.diagnostics_by_island`)."""
    return config.diagnostics and not (config.diagnostics_by_island and island % 2)


def _traits(meter: Meter, temperature: float, models: str) -> ProposerTraits:
    refusal = meter.refusal()
    hint = f"a larger model budget ({refusal})" if refusal is not None else \
        f"a higher temperature (llm.temperature, now {temperature:g}) or another model than {models}"
    return ProposerTraits(writes_first_kernel=True, features=NAMES, exhausted_hint=hint)


def parse_models(spec: str) -> list[tuple[str, float]]:
    """"gpt-4.1=3, gpt-4.1-mini" -> [("gpt-4.1", 3.0), ("gpt-4.1-mini", 1.0)]."""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, weight = part.partition("=")
        try:
            out.append((name.strip(), float(weight) if weight.strip() else 1.0))
        except ValueError:
            raise ValueError(f"llm.models: {part!r} is not NAME or NAME=WEIGHT") from None
    return out


def make_llm_proposer(config: LLMConfig, run_dir: str | Path | None = None, *, device: DeviceInfo | None = None,
                      replay: str | Path | None = None) -> LLMProposer | LLMEnsemble:
    """The model proposer for a run: one model, or an ensemble when `models` lists several (all
    on `config.base_url`, sharing one budget, one reply memory and the endpoint's ceilings). Samples are cached under
    `<run_dir>/llm_cache/`; `replay` names an earlier run directory to serve them from instead
    of the endpoint. Raises ValueError for a config that cannot work (no model, no key for a
    remote endpoint, a money budget for a model of unknown price)."""
    cache_dir = Path(run_dir) / CACHE_DIR if run_dir else None
    replay_from = Path(replay) / CACHE_DIR if replay else None
    if replay_from is not None and not replay_from.is_dir():
        raise ValueError(f"replay: {replay_from} does not exist (was the run made with a model?)")
    models = parse_models(config.models) or [(config.model, 1.0)]
    meter, memory, gate = Meter(config.max_cost, config.max_total_tokens), ReplyMemory(), gate_for(config)
    members = [LLMProposer(replace(config, model=name), device=device, cache_dir=cache_dir,
                           replay_from=replay_from, meter=meter, memory=memory, gate=gate) for name, _ in models]
    if len(members) == 1:
        return members[0]
    return LLMEnsemble(members, [w for _, w in models], config.ensemble_by_island)
