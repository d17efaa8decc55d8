"""Taking the kernel out of a model's reply: text in, `.cu` text or the reason there is none out.

A reply is only ever text. What is taken from it is handed to `fsr.candidate.parse` and later to
the evaluator's compiler; nothing in a reply is executed here or anywhere else on the host.

What models send, and what is taken:
- one fenced block (```cuda, ```cpp, ```c++, ``` or ~~~) with prose around it: that block;
- several blocks: the last one holding a `/* fsr` header (models often show the old kernel
  first), else the last complete code block;
- no fence but a bare `/* fsr` header: from the header to the last line holding a `}`;
- a `<think>...</think>` preamble (reasoning models served by vLLM, SGLang, Ollama): ignored,
  drafts in it are not the answer;
- a block left open: taken if the model stopped on its own (a forgotten closing fence), refused
  as cut off if it ran out of tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fsr.candidate import HEADER_RE

FENCE_LINE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([^\s`]*)[^\n]*$", re.M)
THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)
# Info strings of blocks that may hold the kernel; others (python, toml, bash ...) are skipped
# unless they carry the header.
CODE_LANGS = frozenset({"", "cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp"})
EXCERPT_CHARS = 240


@dataclass(frozen=True)
class Extracted:
    """The candidate text taken from a reply, or None with the reason (said to the model)."""

    source: str | None
    reason: str = ""


@dataclass(frozen=True)
class _Block:
    lang: str
    body: str
    closed: bool


def extract(text: str, finish_reason: str | None = None) -> Extracted:
    """The `.cu` text in a model's reply; `finish_reason` "length" marks a reply cut short."""
    text = THINK_RE.sub("", text or "")
    if not text.strip():
        return Extracted(None, _cut("the reply was empty", finish_reason))
    blocks = _blocks(text)
    complete = [b for b in blocks if b.closed and (b.lang in CODE_LANGS or HEADER_RE.search(b.body))]
    with_header = [b for b in complete if HEADER_RE.search(b.body)]
    if with_header:
        return Extracted(with_header[-1].body)
    open_blocks = [b for b in blocks if not b.closed]
    if open_blocks and HEADER_RE.search(open_blocks[-1].body):
        if finish_reason == "length":
            return Extracted(None, "the reply was cut off inside its code block (it hit the token limit): "
                             "write a shorter kernel, with less commentary")
        return Extracted(open_blocks[-1].body)  # a forgotten closing fence
    if complete:
        return Extracted(None, "the code block has no '/* fsr ... */' header: the file must start with "
                         "the header that declares the launches")
    bare = HEADER_RE.search(text)
    if bare:
        return Extracted(_trim_tail(text[bare.start():]))
    return Extracted(None, _cut("the reply has no code: neither a ```cuda block nor a '/* fsr' header",
                                finish_reason))


def excerpt(text: str, chars: int = EXCERPT_CHARS) -> str:
    """The start of a reply, on one line, for feedback about why it could not be used."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= chars else flat[:chars] + " ..."


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in order; a fence closes only on a bare fence line of the same kind."""
    out: list[_Block] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = FENCE_LINE.match(lines[i].rstrip("\n"))
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            line = lines[i]
            bare = line.strip()
            if len(bare) >= len(fence) and not bare.strip(fence[0]):  # only fence characters
                closed = True
                i += 1
                break
            body.append(line)
            i += 1
        out.append(_Block(lang, "".join(body), closed))
    return out


def _trim_tail(code: str) -> str:
    """Drop prose after the code: everything past the last line that holds a closing brace."""
    lines = code.splitlines()
    last = max((i for i, line in enumerate(lines) if "}" in line), default=len(lines) - 1)
    return "\n".join(lines[: last + 1]) + "\n"


def _cut(reason: str, finish_reason: str | None) -> str:
    return reason + (" (it hit the token limit)" if finish_reason == "length" else "")
