"""The adversarial corpus: kernels the evaluator must judge right, each with the verdict it must get.

Each file starts with `// expect: VERDICT - why` (an em dash or a hyphen). Files live in a folder
named after their task:

- `<task>/*.cu`: the classic corpus (crashes, hangs, wrong answers, refused code); `corpus()`.
- `timing/<task>/*.cu`: kernels that tell a timed launch from a checked one and do less work
  when timed (cheats), each next to its honest twin `NAME.twin.cu`; `side_channels()`. A cheat's
  second line is `// caught-by: DEFENCE | DEFENCE ...`: every defence that stops it on its own, the
  first being the one that decides its verdict once all are built (`DEFENCES`). A twin's second
  line is `// twin-of: NAME.cu`; it expects OK and is the cheat without its lines marked
  `// cheat` (or `# cheat` in the header), which `twin_source` derives.
- `certify/<task>/*.cu`: cheats and twins as in `timing/`, but through channels that screening
  leaves open and certification closes (`__constant__` banks, shared and local memory left by an
  earlier launch, a buffer's allocation slack and a large buffer's page tail, L2 lines kept by an
  eviction-priority hint, a step only a stress set needs); `certification_channels()`. Screening
  judges them OK (the cheat possibly faster); certification must not certify the cheat faster
  than its twin.
- `tuning/<task>/*.cu`: candidates right at every tunable value but one; the second line,
  `// fails-at: NAME=VALUE VERDICT`, names the bad configuration and what it must be recorded as;
  `bad_configurations()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECT = re.compile(r"^// expect: (\w+) (?:—|-) (.+)$")
CAUGHT_BY = re.compile(r"^// caught-by: ([\w-]+(?: \| [\w-]+)*)$")
TWIN_OF = re.compile(r"^// twin-of: ([\w.]+\.cu)$")
FAILS_AT = re.compile(r"^// fails-at: (\w+)=(\d+) (\w+)$")
CHEAT_LINE = re.compile(r"(//|#) cheat$")


@dataclass(frozen=True)
class Defence:
    """What a defence does to a cheat it stops: the verdict it gives, and words one of which the
    verdict's message must hold (none for a defence that leaves nothing to detect: it makes the
    cheat honest, so the cheat is OK and no faster than its twin)."""

    verdict: str
    words: tuple[str, ...] = ()


DEFENCES = {
    # outputs poisoned, non-zeroed scratch poisoned, zeroed scratch zeroed and module globals
    # restored before every timed sample: the cheat finds the state a check finds, and computes
    "state-reset": Defence("OK"),
    # after timing, the outputs the timed launches produced are compared with the expected ones
    "timed-output-check": Defence("WRONG", ("timed",)),
    # before some timed samples picked at random, outputs hold the right answer with random
    # elements spoiled (finite, wrong) instead of NaN, and those samples are checked: a kernel
    # that keeps what it finds in its output keeps the spoiled elements
    "output-decoy": Defence("WRONG", ("timed",)),
    # module-scope __device__ variables bounded in total size (read from the compiled module)
    "module-global-bound": Defence("REJECTED", ("__device__", "module")),
    # certification only (certify/): the module's __constant__ banks restored before every launch
    # sequence (gpu.strict): the cheat finds no table and computes, no faster than its twin
    "constant-restore": Defence("OK"),
    # certification only: every SM's shared memory and every thread slot's local frame scrubbed
    # with a fresh pattern before every launch sequence (gpu.scrub): no marker survives
    "residue-scrub": Defence("OK"),
    # certification only: buffers in whole pages, the end canary running to the allocation's end
    # (gpu.buffers.without_slack): a stash past the end canary breaks it
    "slack-canary": Defence("UNCERTIFIED", ("allocation slack",)),
    # certification only: before every sample, every L2 line of the candidate's buffers set back
    # to the default priority and the flush buffer read under an evict_last policy (gpu.evict):
    # lines loaded at evict_last go with the rest, and the cheat reads its inputs from memory
    "hint-flush": Defence("OK"),
    # certification only: the task's stress sets (offset rows, logits x64...) checked on fresh
    # inputs; a kernel that drops a step only they need fails one, and the failed check is
    # "stress set NAME at SIZE" (gpu.certify)
    "stress-set": Defence("UNCERTIFIED", ("stress set",)),
}


@dataclass(frozen=True)
class Entry:
    """One corpus file and what its header says."""

    task: str
    path: Path
    expect: str
    why: str
    caught_by: tuple[str, ...] = ()
    twin_of: str = ""
    fails_at: tuple[str, int, str] | None = None  # tunable, value, verdict

    @property
    def name(self) -> str:
        return f"{self.task}/{self.path.stem}"


def parse(path: Path) -> Entry:
    lines = path.read_text().splitlines()
    m = EXPECT.match(lines[0]) if lines else None
    assert m, f"{path} has no '// expect: VERDICT - why' first line"
    second = lines[1] if len(lines) > 1 else ""
    entry = Entry(path.parent.name, path, m.group(1), m.group(2))
    if c := CAUGHT_BY.match(second):
        return Entry(entry.task, path, entry.expect, entry.why, caught_by=tuple(c.group(1).split(" | ")))
    if t := TWIN_OF.match(second):
        return Entry(entry.task, path, entry.expect, entry.why, twin_of=t.group(1))
    if f := FAILS_AT.match(second):
        return Entry(entry.task, path, entry.expect, entry.why, fails_at=(f.group(1), int(f.group(2)), f.group(3)))
    return entry


def corpus() -> list[tuple[str, Path, str]]:
    """(task, path, expected verdict) for every kernel of the classic corpus."""
    return [(e.task, e.path, e.expect) for e in map(parse, sorted(HERE.glob("*/*.cu")))]


def side_channels() -> list[tuple[Entry, Entry]]:
    """(cheat, its twin) for every cheat of timing/."""
    return _pairs(sorted(HERE.glob("timing/*/*.cu")))


def _pairs(paths: list[Path]) -> list[tuple[Entry, Entry]]:
    entries = [parse(p) for p in paths]
    twins = {(e.task, e.twin_of): e for e in entries if e.twin_of}
    return [(e, twins[(e.task, e.path.name)]) for e in entries if not e.twin_of]


def certification_channels() -> list[tuple[Entry, Entry]]:
    """(cheat, its twin) for every cheat of certify/: channels only certification closes."""
    return _pairs(sorted(HERE.glob("certify/*/*.cu")))


def bad_configurations() -> list[Entry]:
    return [parse(p) for p in sorted(HERE.glob("tuning/*/*.cu"))]


def all_entries() -> list[Entry]:
    return [parse(p) for p in sorted(HERE.glob("**/*.cu"))]


def twin_source(cheat: Entry) -> str:
    """The honest twin of a cheat: its code without the lines marked as cheating, under a
    header saying whose twin it is (the cheat's leading comment, which describes the trick,
    goes too)."""
    lines = cheat.path.read_text().splitlines()
    body = lines[next(i for i, line in enumerate(lines) if not line.startswith("//")):]
    head = [f"// expect: OK - honest twin of {cheat.path.name}: the same kernel without its cheat",
            f"// twin-of: {cheat.path.name}"]
    return "\n".join(head + [line for line in body if not CHEAT_LINE.search(line)]) + "\n"


def twin_path(cheat: Entry) -> Path:
    return cheat.path.with_name(cheat.path.stem + ".twin.cu")
