"""One config tree of dataclasses, loaded once by the CLI, passed down, written to run.json.

Sections belong to the seams that read them. Environment variables are used only for secrets
(the API key named by `LLMConfig.api_key_env`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fsr.files import InputFileError, read_input


@dataclass(frozen=True)
class EvalConfig:
    """How candidates are checked and timed."""

    timeout_s: float = 30.0  # one candidate's verify + tune + time in the child, then TIMEOUT
    bench_budget_s: float = 0.15  # timed samples run until this much device time is spent...
    bench_min_samples: int = 5  # the first round; more while the median is not yet known well enough
    bench_max_samples: int = 200
    bench_rel_error: float = 0.003  # ...or until the median's standard error is this fraction of it (0: the whole budget)
    warmup_s: float = 0.03
    input_sets: int = 3  # benchmark input sets rotated during timing
    plausibility_margin: float = 1.10  # SUSPECT above this fraction of a measured ceiling
    arch: str = ""  # "" = the device's own; without a GPU, sm_90
    seed: int = 0
    host_threads: int = 0  # the GPU child's BLAS threads (references); 0 = the host's cores / its GPU workers
    calls_per_worker: int = 8  # candidates a GPU worker holds at once: one on the GPU, the others compiling ahead
    compile_cache_dir: str = ""  # compiled programs shared on disk by a node's processes; "" = ~/.cache/fsr/compile, "off" = none
    compile_cache_max_bytes: int = 2 * 1024**3  # past this, the least recently used programs are removed
    # Tasks' screening benchmark sets with their float64 references, built once a node and shared
    # by its GPU children and later campaigns ("off" = none, the default until its effect on a
    # campaign is measured; "" = ~/.cache/fsr/contents; or a folder; never certification's sets);
    # past the byte bound the least recently used sets are removed.
    contents_cache_dir: str = "off"
    contents_cache_max_bytes: int = 16 * 1024**3
    # One compile of proposer code, in a compile process: past either bound it is killed and the
    # candidate gets COMPILE_ERROR (honest kernels take well under 5 s and 0.5 GiB).
    compile_timeout_s: float = 60.0
    compile_max_bytes: int = 4 * 1024**3
    # The torch.compile comparator: "default", "max-autotune" (slower to compile, closer to what a
    # tuned PyTorch reaches) or "off". Compiled once per GPU child and task; its compile time is
    # recorded apart (torch_compile_s), never in the comparator's latency.
    torch_compile: str = "default"
    # The L2 flush before each comparator sample (the library, PyTorch eager, torch.compile):
    # "ordinary", the one screening uses, or "certification", which first sets every line of the
    # comparator's inputs back to the default eviction priority, as certification does for a
    # candidate (docs/judge.md): a comparator that loads its inputs under evict_last, as
    # torch.compile's Triton kernels do, then gains nothing from lines that outlast the flush.
    comparator_flush: str = "ordinary"
    # Prepared tasks' device buffers (benchmark inputs, expected outputs) a GPU child keeps, in
    # bytes; past it the least recently used task is dropped and prepared again when needed, by an
    # upload of its host contents. 0 = 65% of the GPU's memory.
    prepared_max_bytes: int = 0
    # Tasks' host contents (benchmark inputs and float64 references) a GPU child keeps, in bytes;
    # past it the least recently used are dropped and built again when needed. 0 = 40% of the
    # host's memory times the worker's share of its cores.
    prepared_host_max_bytes: int = 0
    # Certification (docs/judge.md, "Two tiers"): a screened result is judged again on inputs from
    # the operating system's entropy before it counts. "off": every screened OK result counts as
    # it did before certification existed; "leads": a result that would become its task's best is
    # certified before it leads the search; "end": the search runs on screened times and a task's
    # fastest is certified when its budget is spent (or when it would reach the target speedup).
    # true means "end", false "off". "end" by default: it costs about one certification a task, and
    # its scale gate ran at 0.97-1.08 of off's rate beside it on the same host (BENCHMARKS.md,
    # "Certification"); "off" gives back the screened results of earlier versions.
    certify: str = "end"

    def __post_init__(self) -> None:
        object.__setattr__(self, "certify", certify_mode(self.certify))  # EvalConfig(certify=True): "end"

    @property
    def certifies(self) -> bool:
        """Whether results are certified at all (any mode but "off")."""
        return self.certify != "off"


@dataclass(frozen=True)
class TuneConfig:
    """Launch-parameter tuning of each candidate that passes its checks."""

    trials: int = 8  # 0 turns tuning off; a grid when the space has at most this many points
    time_budget_s: float = 20.0
    trial_bench_budget_s: float = 0.025  # a trial's device time for samples (one sample at least)
    trial_max_samples: int = 4  # a trial's samples at most (the winner is timed again in full)
    trial_stop_ratio: float = 1.1  # a trial stops after 2 samples whose fastest is this much slower than the best
    trial_cut_ratio: float = 1.25  # ...or after 1 sample this much slower
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
    # A campaign that ends by itself (its budgets; not a user's stop) with tasks whose comparators
    # no evaluation carried asks its workers for them before the table is written, waiting this
    # many seconds at most (the evaluations in flight finish first); 0 = not at all.
    comparators_wait_s: float = 120.0


@dataclass(frozen=True)
class LLMConfig:
    """A language model behind any OpenAI-compatible endpoint; empty model = offline mutator."""

    model: str = ""
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.8
    max_tokens: int = 4096
    candidates_per_request: int = 1
    concurrency: int = 1024  # ceiling of requests in flight; the pace itself is measured (fsr.search.pace)
    max_requests_per_minute: int = 0  # 0 = no limit
    max_tokens_per_minute: int = 0  # prompt + completion, worst case reserved until settled; 0 = no limit
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
    # Each kernel's digested machine-code facts in the feedback (fsr.evaluate.diagnose); with
    # diagnostics_by_island, islands alternate (even ones see them, odd ones do not), an ablation
    # within one campaign that the report shows side by side.
    diagnostics: bool = True
    diagnostics_by_island: bool = False


@dataclass(frozen=True)
class Config:
    eval: EvalConfig = field(default_factory=EvalConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)


class ConfigError(ValueError):
    """A config file or override that names an unknown key or holds a value of the wrong type or
    outside its range; the message names the section, the field, the value and what is allowed."""


@dataclass(frozen=True)
class Range:
    """Allowed numbers: `low` (inclusive unless `open_low`) to `high` (inclusive); None = no bound."""

    low: float | None = 0
    high: float | None = None
    open_low: bool = False

    def allows(self, x: float) -> bool:
        above = self.low is None or (x > self.low if self.open_low else x >= self.low)
        return above and (self.high is None or x <= self.high)

    def __str__(self) -> str:
        low = "" if self.low is None else f"{'>' if self.open_low else '>='} {self.low:g}"
        high = "" if self.high is None else f"<= {self.high:g}"
        return " and ".join(p for p in (low, high) if p) or "any value"


POSITIVE, AT_LEAST_ONE = Range(0, open_low=True), Range(1)
# Numbers are finite and >= 0 (counts, seconds, seeds, budgets) unless listed here.
RANGES: dict[str, Range] = {
    "eval.timeout_s": POSITIVE, "eval.bench_budget_s": POSITIVE, "eval.warmup_s": Range(0),
    "eval.bench_min_samples": AT_LEAST_ONE, "eval.bench_max_samples": AT_LEAST_ONE,
    "eval.input_sets": AT_LEAST_ONE, "eval.calls_per_worker": AT_LEAST_ONE, "eval.plausibility_margin": Range(1),  # below 1, honest kernels are SUSPECT
    "eval.compile_cache_max_bytes": AT_LEAST_ONE, "eval.compile_timeout_s": POSITIVE,
    "eval.compile_max_bytes": Range(256 * 1024**2),  # below that, honest compiles fail
    "eval.prepared_max_bytes": Range(0),
    "eval.prepared_host_max_bytes": Range(0),
    "tune.time_budget_s": POSITIVE, "tune.trial_bench_budget_s": POSITIVE, "tune.trial_max_samples": AT_LEAST_ONE,
    "tune.trial_stop_ratio": Range(1),  # below 1, a trial as fast as the best is stopped
    "tune.trial_cut_ratio": Range(1),
    "search.islands": AT_LEAST_ONE, "search.population": AT_LEAST_ONE, "search.tournament": AT_LEAST_ONE,
    "search.migrate_every": AT_LEAST_ONE, "search.max_evaluations": AT_LEAST_ONE,
    "llm.temperature": Range(0, 2), "llm.max_tokens": AT_LEAST_ONE, "llm.candidates_per_request": AT_LEAST_ONE,
    "llm.concurrency": AT_LEAST_ONE, "llm.max_requests_per_minute": Range(0), "llm.max_tokens_per_minute": Range(0), "llm.timeout_s": POSITIVE, "llm.prompt_budget_tokens": AT_LEAST_ONE,
    "llm.input_price_per_mtok": Range(None), "llm.output_price_per_mtok": Range(None),  # negative: price table
}
TORCH_COMPILE_MODES = ("default", "max-autotune", "off")
CERTIFY_MODES = ("off", "leads", "end")
COMPARATOR_FLUSHES = ("ordinary", "certification")


def certify_mode(value: Any) -> str:
    """`eval.certify` as a mode: true (a config from before the modes, or `--certify true`) is
    "end", false "off"; anything else as it is (checked against CERTIFY_MODES)."""
    if value is True or value in ("true", "on"):
        return "end"
    if value is False or value in ("false", ""):
        return "off"
    return value
ARCH_RE = re.compile(r"^sm_\d{2,3}[af]?$")  # a real arch: fsr loads a cubin, which compute_XX gives none of


def _url(text: str) -> str | None:
    """Why `text` is not an endpoint URL, or None if it is one."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL such as http://localhost:8000/v1"
    return None


def _cache_dir(text: str) -> str | None:
    """Why `text` is not "off" or an absolute folder (a Ray worker's working folder is not the driver's)."""
    if text == "off" or (text.startswith(("/", "~")) and "\0" not in text):
        return None
    return 'expected "off" or an absolute folder such as /scratch/fsr-compile ("" = ~/.cache/fsr/compile)'


# Text fields with a format: a function that says why a (non-empty) value is refused.
FORMATS: dict[str, Callable[[str], str | None]] = {
    "llm.base_url": _url,
    "eval.arch": lambda s: None if ARCH_RE.match(s) else "expected an architecture such as sm_90 or sm_90a",
    "eval.torch_compile": lambda s: None if s in TORCH_COMPILE_MODES else
    'expected "default", "max-autotune" or "off"',
    "eval.compile_cache_dir": _cache_dir,
    "eval.certify": lambda s: None if s in CERTIFY_MODES else 'expected "off", "leads" or "end" (true = "end")',
    "eval.comparator_flush": lambda s: None if s in COMPARATOR_FLUSHES else 'expected "ordinary" or "certification"',
}
# Values of an older type taken as their newer one before they are checked: `eval.certify` was a bool.
ALIASES: dict[str, Callable[[Any], Any]] = {"eval.certify": certify_mode}


def check_value(section: str, name: str, kind: Any, value: Any) -> Any:
    """`value` as the field's type (an int is a float where a float is asked), or ValueError
    saying what is allowed."""
    key = f"{section}.{name}"
    value = ALIASES[key](value) if key in ALIASES else value
    args = typing.get_args(kind)
    if type(None) in args:  # an optional field: None, or a value of the other type
        rest = [a for a in args if a is not type(None)]
        return value if value is None or len(rest) != 1 else check_value(section, name, rest[0], value)
    if kind in (int, float):
        return _number(kind, RANGES.get(key, Range()), value)
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value
    if kind is not str:  # a field of a type this table does not know: the dataclass decides
        return value
    if not isinstance(value, str):
        raise ValueError("expected a string")
    why = FORMATS[key](value) if value and key in FORMATS else None
    if why:
        raise ValueError(why)
    return value


def _number(kind: type, rng: Range, value: Any) -> Any:
    """`value` as an int or a float within `rng`, or ValueError."""
    is_int = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63  # TOML's ints
    ok = is_int or (kind is float and isinstance(value, float) and math.isfinite(value))
    if not ok or not rng.allows(value):
        what = "an integer" if kind is int else "a number" if rng != Range(None) else "a finite number"
        raise ValueError(f"expected {what} {rng}" if rng != Range(None) else f"expected {what}")
    return kind(value)


def parse_text(section: str, name: str, text: str) -> Any:
    """A command-line value for a config field: converted by the field's type and checked;
    ValueError says what is allowed."""
    kind = _field_types(_section_class(section))[name]
    if kind in (int, float):
        try:
            value: Any = int(text) if kind is int else float(text)
        except ValueError:
            value = text
        return check_value(section, name, kind, value)
    return check_value(section, name, kind, text)


def _section_class(section: str) -> type:
    return {f.name: f.default_factory for f in dataclasses.fields(Config)}[section]  # type: ignore[return-value]


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str | bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load(path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Defaults, then a TOML file's sections, then overrides (from the command line)."""
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(read_input(path, "config"))
        except InputFileError as e:
            raise ConfigError(str(e)) from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config {path}: {e}") from None
        try:
            from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"config {path}: {e}") from None
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    return from_dict(data)


def from_dict(data: dict[str, Any]) -> Config:
    """A Config from plain sections (TOML, run.json); raises ConfigError naming what is wrong."""
    if not isinstance(data, dict):
        raise ConfigError("the config must be a table of sections")
    unknown_sections = set(data) - {f.name for f in dataclasses.fields(Config)}
    if unknown_sections:
        raise ConfigError(f"unknown config section(s): {', '.join(sorted(map(str, unknown_sections)))}")
    sections = {name: _section(name, data.get(name, {})) for name in (f.name for f in dataclasses.fields(Config))}
    cfg = Config(**sections)
    if cfg.eval.bench_min_samples > cfg.eval.bench_max_samples:
        raise ConfigError(f"[eval] bench_min_samples = {cfg.eval.bench_min_samples}: expected at most "
                          f"bench_max_samples ({cfg.eval.bench_max_samples})")
    if cfg.search.elites > cfg.search.population:
        raise ConfigError(f"[search] elites = {cfg.search.elites}: expected at most population "
                          f"({cfg.search.population})")
    return cfg


def _section(section: str, values: Any) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"[{section}] must be a table of settings, not {_shown(values)}")
    cls = _section_class(section)
    types = _field_types(cls)
    unknown = set(values) - set(types)
    if unknown:
        raise ConfigError(f"[{section}] has unknown key(s): {', '.join(sorted(map(str, unknown)))}")
    checked = {}
    for name, value in values.items():
        try:
            checked[name] = check_value(section, name, types[name], value)
        except ValueError as e:
            raise ConfigError(f"[{section}] {name} = {_shown(value)}: {e}") from None
    return cls(**checked)


def to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)
