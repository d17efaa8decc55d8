"""The catalogue of GPU optimisation features, their detectors, and the per-task feature policy.

A detector is a regular expression over a kernel's source with comments stripped and the
inactive branches of `#if` on the candidate's defines removed, so a feature template with
`#if VEC4 ... #endif` is tagged VEC4 only when VEC4 is on. A template switch that is on counts
as its feature even where the regex misses it. Detectors are heuristics, not a parser: each
says what it looks for, and tests pin them on real kernels, with negative cases.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from fsr.candidate import HEADER_RE, strip_comments
from fsr.propose.cpp import active_source
from fsr.types import Candidate, Verdict

LineCheck = Callable[[str, int], bool]  # (the matched line, the match's column) -> does it count?


@dataclass(frozen=True)
class Feature:
    """A named optimisation and how to recognise it in source.

    Detection is on the search's hot path (every proposal), so: the patterns run only if one of
    `hints` (plain substrings) occurs, and every pattern starts with a literal, because Python's
    `re` scans for a literal prefix quickly but tries a leading alternation or `\b` at every
    position (30x slower on a 10 kB template). `check`, when given, confirms a match from its
    line (what a leading `\b` or look-behind would have said).
    """

    name: str
    what: str  # what the optimisation is, for people and for prompts
    detects: str  # what the detector looks for
    patterns: tuple[re.Pattern[str], ...]
    hints: tuple[str, ...]
    check: LineCheck | None = None

    def found_in(self, body: str) -> bool:
        """Whether the feature occurs in `body` (comments and header already stripped)."""
        if not any(h in body for h in self.hints):
            return False
        for pattern in self.patterns:
            for m in pattern.finditer(body):
                if self.check is None:
                    return True
                start = body.rfind("\n", 0, m.start()) + 1
                end = body.find("\n", m.end())
                if self.check(body[start:end if end >= 0 else len(body)], m.start() - start):
                    return True
        return False


def _res(*texts: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(t) for t in texts)


def _word_start(line: str, column: int) -> bool:
    """The match starts a word (or follows `u` or `__`: uint4, __half2)."""
    before = line[:column]
    return not before or not (before[-1].isalnum() or before[-1] == "_") or before[-1] == "u" \
        or before.endswith("__")


def _register_array(line: str, column: int) -> bool:
    """`[` of an indented (function-local), non-__shared__ array declaration: registers."""
    return "__shared__" not in line and _LOCAL_ARRAY.fullmatch(line[:column]) is not None


def _rescaled(line: str, column: int) -> bool:
    """`s *= exp(...)` or `s = s * exp(...)`: a running value rescaled (online softmax)."""
    return line[column:column + 2] == "*=" or _SELF_ASSIGN.search(line[:column]) is not None


def _flipped(line: str, column: int) -> bool:
    """`stage ^= 1` or `buf = 1 - buf`: a buffer index alternating between two values."""
    return any(w in line for w in ("buf", "stage", "pipe"))


_LOCAL_ARRAY = re.compile(r"[ \t]+(?:const\s+)?(?:float[24]?|double|int|unsigned|half|__half)\s+\w+\s*")
_SELF_ASSIGN = re.compile(r"(?<![\w.>])([\w.\[\]>-]+)\s*=\s*\1\s*$")  # "a.s = a.s " before the "*"

CATALOGUE: tuple[Feature, ...] = (
    Feature("COALESCE", "consecutive threads touch consecutive addresses",
            "a block-, warp- or grid-stride loop: for (...; ...; i += blockDim.x | a BLOCK/THREADS/TPR "
            "name | a stride | warpSize | 32); one-thread-per-element code is not tagged",
            _res(r"for\s*\([^;]*;[^;]*;[^)]*\+=\s*(?:blockDim\.x|[A-Z_]*(?:BLOCK|THREADS|TPR)\w*|\w*[sS]tride\w*"
                 r"|STRIDE\w*|WARP_SIZE|warpSize|32)\b"), ("+=",)),
    Feature("VEC4", "vectorised 64/128-bit loads and stores",
            "vector types float2/4, int2/4, uint2/4, double2, half2 (declarations or casts)",
            _res(r"float[24]\b", r"int[24]\b", r"double2\b", r"half2\b"),
            ("float2", "float4", "int2", "int4", "double2", "half2"), _word_start),
    Feature("SMEM_TILE", "tiles staged through shared memory",
            "a two-dimensional __shared__ array, or dynamic shared memory (extern __shared__)",
            _res(r"__shared__[^;\[]*\[[^\]]+\]\s*\[", r"extern\s+__shared__"), ("__shared__",)),
    Feature("WARP_SHUFFLE", "register exchange within a warp",
            "__shfl*_sync, __reduce_*_sync or cooperative-groups reduce",
            _res(r"__shfl(?:_xor|_down|_up)?_sync\s*\(", r"__reduce_\w+_sync\s*\(", r"cg::reduce\s*\("),
            ("__shfl", "__reduce_", "cg::reduce")),
    Feature("REG_BLOCK", "several outputs per thread held in registers",
            "an indented local array declaration, e.g. float acc[TM][TN]; (not __shared__)",
            _res(r"\[[^\]\n]+\](?:\s*\[[^\]\n]+\])?\s*(?:;|=\s*\{)"), ("[",), _register_array),
    Feature("UNROLL", "loops unrolled by the compiler on request",
            "#pragma unroll or _Pragma(\"unroll\"), except an explicit unroll 1",
            _res(r"unroll(?!\s+1\b)"), ("unroll",),
            lambda line, col: re.search(r"(?:#\s*pragma\s+|_Pragma\s*\(\s*\")$", line[:col]) is not None),
    Feature("LAUNCH_BOUNDS", "register allocation bounded for a known block size",
            "__launch_bounds__(...)", _res(r"__launch_bounds__\s*\("), ("__launch_bounds__",)),
    Feature("READONLY", "loads through the read-only (non-coherent) path",
            "__ldg(...) or a const __restrict__ pointer",
            _res(r"__ldg\s*\(", r"__restrict__"), ("__ldg", "__restrict__"),
            lambda line, col: line[col:col + 5] == "__ldg" or re.search(r"const\s+[\w:]+\s*\*\s*(?:const\s+)?$",
                                                                        line[:col]) is not None),
    Feature("ASYNC_COPY", "global-to-shared copies that bypass registers and overlap compute",
            "cp.async, __pipeline_memcpy_async or cuda::memcpy_async",
            _res(r"cp\.async", r"memcpy_async\s*\("), ("cp.async", "memcpy_async")),
    Feature("TENSOR_CORE", "matrix multiply-accumulate on tensor cores",
            "wmma::, mma.sync / wgmma in inline PTX", _res(r"wmma::", r"mma\.sync", r"wgmma"), ("mma",)),
    Feature("ONLINE", "one-pass (online) max and sum, rescaling the running sum",
            "a running value rescaled by an exponential: s *= expf(...) or s = s * __expf(...)",
            _res(r"\*=?\s*(?:__)?expf?\s*\("), ("exp",), _rescaled),
    Feature("FAST_MATH", "hardware intrinsics instead of IEEE-accurate libm",
            "__expf/__logf/__sinf/__cosf/__powf/__fdividef/__frcp_*/__exp10f (or --use_fast_math)",
            _res(r"__(?:expf|exp10f|logf|log2f|sinf|cosf|tanf|powf|fdividef|frcp_r\w)\s*\("), ("__",)),
    Feature("DOUBLE_BUFFER", "two buffers so loading the next tile overlaps computing this one",
            "a __shared__ array whose first dimension is [2], or a buf/stage/pipe index flipped "
            "with ^= 1 or = 1 - i",
            _res(r"__shared__[^;\[]*\[\s*2\s*\]", r"\^=\s*1\b", r"=\s*1\s*-\s*\w*(?:buf|stage|pipe)"),
            ("__shared__", "buf", "stage", "pipe"),
            lambda line, col: "__shared__" in line or _flipped(line, col)),
)
BY_NAME = {f.name: f for f in CATALOGUE}
NAMES = tuple(f.name for f in CATALOGUE)
# Template switch names that mean a catalogue feature under another spelling.
ALIASES = {"TENSOR_CORES": "TENSOR_CORE", "TF32X3": "TENSOR_CORE", "SHUFFLE": "WARP_SHUFFLE", "LDG": "READONLY",
           "TILE": "SMEM_TILE", "ONLINE_SOFTMAX": "ONLINE", "VECTORIZE": "VEC4", "ASYNC": "ASYNC_COPY"}


def feature_name(switch: str) -> str:
    """The catalogue name a template switch stands for (its own name if not in the catalogue)."""
    upper = switch.upper()
    return ALIASES.get(upper, upper)


def detect_source(source: str, defines: Mapping[str, int] | None = None) -> frozenset[str]:
    """Catalogue features present in `source` (header and comments ignored, inactive #if branches
    on `defines` removed)."""
    body = HEADER_RE.sub("", strip_comments(source))
    if defines is not None:
        body = active_source(body, defines)
    return frozenset(f.name for f in CATALOGUE if f.found_in(body))


def detect(candidate: Candidate) -> frozenset[str]:
    """The features of a candidate: its source's detected features plus switches that are on."""
    defines = dict(candidate.resolved_defines())
    found = set(detect_source(candidate.source, defines))
    found.update(feature_name(t.name) for t in candidate.features if defines.get(t.name, 0))
    if "--use_fast_math" in candidate.compile_options:
        found.add("FAST_MATH")
    return frozenset(found)


def jaccard_distance(a: frozenset[str], b: frozenset[str]) -> float:
    """1 - |a & b| / |a | b|; 0 for two empty sets (two plain kernels are alike)."""
    union = len(a | b)
    return 0.0 if union == 0 else 1.0 - len(a & b) / union


# ---- the policy ---------------------------------------------------------------------------------

# A failed child (compile error, wrong result, crash, timeout) counts as this log-speedup for the
# features it added: as bad as a 2x slowdown. SUSPECT is not the feature's fault and is skipped.
FAILURE_LOG_SPEEDUP = math.log(0.5)
PENALISED = frozenset({Verdict.COMPILE_ERROR, Verdict.REJECTED, Verdict.LAUNCH_ERROR, Verdict.WRONG,
                       Verdict.CRASH, Verdict.TIMEOUT, Verdict.UNCERTIFIED})


@dataclass(frozen=True)
class Choice:
    """What the policy asks a proposer for: features to add and features to remove."""

    wanted: tuple[str, ...]
    unwanted: tuple[str, ...]


class FeaturePolicy:
    """Thompson sampling over a Normal posterior on each feature's log-speedup.

    Why Normal on log-speedup rather than Beta on "did it help": speedups compose by
    multiplication, so their logarithms add, are symmetric (2x faster and 2x slower are +-0.69)
    and average sensibly over noisy timings; and the size of a gain matters (a feature that gives
    2x should beat one that gives 1.02x every time, which a Beta over success counts cannot
    tell apart). Each feature's effect theta has a prior N(0, PRIOR_SD^2); each observation is
    theta plus N(0, NOISE_SD^2) noise (tuning and timing noise, and interactions with other
    features), so the posterior is conjugate and kept as two numbers per feature (count and sum
    of observed log-speedups), which makes it reconstructible by replaying the lineage.

    An observation is made for each feature that differs between a child and its first parent:
    log(parent_us / child_us) for a feature the child added, its negative for one it removed,
    FAILURE_LOG_SPEEDUP for a feature added by a child that failed. To choose, one theta is
    sampled per feature (with the posterior spread multiplied by the island's `explore`), and the
    toggle of the parent's set with the highest sampled gain is asked for (sometimes also the
    second, if its sampled gain is positive).
    """

    PRIOR_SD = 0.5
    NOISE_SD = 0.35

    def __init__(self, features: Iterable[str]) -> None:
        self.features = tuple(dict.fromkeys(features))
        self.count = dict.fromkeys(self.features, 0)
        self.total = dict.fromkeys(self.features, 0.0)

    def observe(self, feature: str, log_speedup: float) -> None:
        """One measured effect of adding `feature` (ignored if not in this policy's set)."""
        if feature in self.count:
            self.count[feature] += 1
            self.total[feature] += log_speedup

    def learn(self, parent: frozenset[str], child: frozenset[str], parent_us: float,
              child_us: float | None, verdict: Verdict) -> None:
        """Credit the features that differ between a parent and its child with the result."""
        added, removed = child - parent, parent - child
        if verdict == Verdict.OK and child_us and math.isfinite(parent_us):
            delta = math.log(parent_us / child_us)
            for f in added:
                self.observe(f, delta)
            for f in removed:
                self.observe(f, -delta)
        elif verdict in PENALISED:
            for f in added:
                self.observe(f, FAILURE_LOG_SPEEDUP)

    def posterior(self, feature: str) -> tuple[float, float]:
        """(mean, standard deviation) of the feature's log-speedup."""
        precision = 1 / self.PRIOR_SD**2 + self.count[feature] / self.NOISE_SD**2
        return self.total[feature] / self.NOISE_SD**2 / precision, math.sqrt(1 / precision)

    def choose(self, have: frozenset[str], rng: random.Random, explore: float = 1.0,
               max_toggles: int = 2) -> Choice:
        """Sample each feature's effect; ask for the best one or two toggles of `have`."""
        if not self.features:
            return Choice((), ())
        gains = {}
        for f in self.features:
            mean, sd = self.posterior(f)
            theta = rng.gauss(mean, sd * explore)
            gains[f] = -theta if f in have else theta
        ranked = sorted(self.features, key=lambda f: -gains[f])
        # A second toggle, sometimes, and only if it too is expected to help.
        k = 2 if max_toggles >= 2 and len(ranked) > 1 and gains[ranked[1]] > 0 and rng.random() < 0.4 else 1
        top = ranked[:k]
        return Choice(tuple(f for f in top if f not in have), tuple(f for f in top if f in have))
