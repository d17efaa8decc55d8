"""One config tree of dataclasses, loaded once by the CLI, passed down, written to run.json.

Sections belong to the seams that read them. Environment variables are used only for secrets
(the API key named by `LLMConfig.api_key_env`).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EvalConfig:
    """How candidates are checked and timed."""

    timeout_s: float = 30.0  # one candidate's verify + tune + time in the child, then TIMEOUT
    bench_budget_s: float = 0.15  # timed samples run until this much device time is spent...
    bench_min_samples: int = 10
    bench_max_samples: int = 200
    warmup_s: float = 0.03
    input_sets: int = 3  # benchmark input sets rotated during timing
    plausibility_margin: float = 1.10  # SUSPECT above this fraction of a measured ceiling
    arch: str = ""  # "" = the device's own; without a GPU, sm_90
    seed: int = 0
    host_threads: int = 0  # the GPU child's BLAS threads (references); 0 = the host's cores / its GPU workers


@dataclass(frozen=True)
class TuneConfig:
    """Launch-parameter tuning of each candidate that passes its checks."""

    trials: int = 8  # 0 turns tuning off; a grid when the space has at most this many points
    time_budget_s: float = 20.0
    trial_bench_budget_s: float = 0.05
    seed: int = 0


@dataclass(frozen=True)
class SearchConfig:
    """The island search."""

    islands: int = 4
    population: int = 16
    elites: int = 4
    tournament: int = 3
    migrate_every: int = 20
    migrants: int = 2
    max_evaluations: int = 200
    max_wall_s: float = 0.0  # 0 = no limit
    target_speedup: float = 0.0  # 0 = no target
    seed: int = 0


@dataclass(frozen=True)
class LLMConfig:
    """A language model behind any OpenAI-compatible endpoint; empty model = offline mutator."""

    model: str = ""
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.8
    max_tokens: int = 4096
    candidates_per_request: int = 1
    concurrency: int = 4
    timeout_s: float = 120.0
    retries: int = 4
    backoff_s: float = 1.0
    max_wait_s: float = 120.0  # the longest Retry-After honoured
    max_cost: float = 0.0  # USD for the run; 0 = no limit
    max_total_tokens: int = 0  # prompt + completion tokens for the run; 0 = no limit
    input_price_per_mtok: float = -1.0  # USD per million tokens; negative = built-in price table
    output_price_per_mtok: float = -1.0
    prompt_budget_tokens: int = 16000  # size limit of one prompt
    models: str = ""  # an ensemble on one endpoint, e.g. "gpt-4.1=3,gpt-4.1-mini=1"
    ensemble_by_island: bool = False
    send_seed: bool = True


@dataclass(frozen=True)
class Config:
    eval: EvalConfig = field(default_factory=EvalConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)


class ConfigError(ValueError):
    """A config file or override that names an unknown key or has a wrong type."""


def load(path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Defaults, then a TOML file's sections, then overrides (from the command line)."""
    data: dict[str, dict[str, Any]] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"config {path}: {e}") from None
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    return from_dict(data)


def from_dict(data: dict[str, dict[str, Any]]) -> Config:
    sections = {}
    for f in dataclasses.fields(Config):
        cls = f.default_factory  # type: ignore[misc]
        values = data.get(f.name, {})
        known = {g.name: g for g in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(values) - set(known)
        if unknown:
            raise ConfigError(f"[{f.name}] has unknown key(s): {', '.join(sorted(unknown))}")
        sections[f.name] = cls(**values)  # type: ignore[operator]
    unknown_sections = set(data) - set(sections)
    if unknown_sections:
        raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown_sections))}")
    return Config(**sections)


def to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)
