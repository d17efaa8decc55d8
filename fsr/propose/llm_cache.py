"""The response cache under a run directory (`<run>/llm_cache/`): one atomically written JSON file
per sample, named by a hash of (model, sha256 of the prompt messages, sample index); each distinct
prompt once under `prompts/`; `calls.jsonl`, one line per call. fsr.propose.llm_client says how
samples are numbered so that a replay draws the same ones."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsr.files import atomic_write


@dataclass(frozen=True)
class Sample:
    """One choice of a completion. `index` is its ordinal for (model, prompt)."""

    index: int
    text: str
    finish_reason: str | None
    prompt_tokens: int  # this sample's share of its call (the prompt is charged to its first)
    completion_tokens: int
    estimated: bool  # the server reported no usage: counts are characters / 4
    cached: bool = False



class ResponseCache:
    """Samples on disk, one atomically written JSON file each (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path(self, model: str, prompt_sha: str, index: int) -> Path:
        name = hashlib.sha256(f"{model}\0{prompt_sha}\0{index}".encode()).hexdigest()[:32]
        return self.dir / f"{name}.json"

    def get(self, model: str, prompt_sha: str, index: int) -> Sample | None:
        try:
            d = json.loads(self.path(model, prompt_sha, index).read_text())
        except (OSError, ValueError):
            return None
        return Sample(index, d["text"], d["finish_reason"], d["prompt_tokens"], d["completion_tokens"],
                      d["tokens_estimated"], cached=True)

    def put(self, model: str, prompt_sha: str, sample: Sample) -> None:
        doc = {"model": model, "prompt_sha256": prompt_sha, "sample": sample.index, "text": sample.text,
               "finish_reason": sample.finish_reason, "prompt_tokens": sample.prompt_tokens,
               "completion_tokens": sample.completion_tokens, "tokens_estimated": sample.estimated,
               "created_at": datetime.now(UTC).isoformat()}
        _atomic_write(self.path(model, prompt_sha, sample.index), json.dumps(doc, indent=1))

    def put_prompt(self, prompt_sha: str, messages: Sequence[Mapping[str, str]]) -> None:
        path = self.dir / "prompts" / f"{prompt_sha}.json"
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            _atomic_write(path, json.dumps(list(messages), indent=1))

    def log(self, record: Mapping[str, Any]) -> None:
        line = json.dumps({"at": datetime.now(UTC).isoformat(), **record}) + "\n"
        with self._lock, open(self.dir / "calls.jsonl", "a") as f:
            f.write(line)


def _atomic_write(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def prompt_sha(messages: Sequence[Mapping[str, str]]) -> str:
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True).encode()).hexdigest()
