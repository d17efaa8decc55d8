"""Doubles for searching without a GPU (the tests' and bench/'s): a softmax feature template, an
evaluator whose latency is a deterministic function of a candidate's features and defines, an
executor that runs it in-process (on a virtual or a real clock), and an evaluator that replays
recorded results."""

from __future__ import annotations

import heapq
import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fsr import certification
from fsr.candidate import parse, with_defines
from fsr.execute.base import BOUND_RAN_OUT, Evaluator, Executor, Workers, WorkerStats
from fsr.execute.local import EvaluatorUnavailable
from fsr.propose.features import detect
from fsr.tasks import load
from fsr.types import Candidate, Comparison, DeviceInfo, Evaluation, Task, Tier, Timing, Verdict

# A real, compilable softmax feature template (one block per row), used where the repository's
# own templates may not exist yet.
TEMPLATE = r"""/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024]

[features]
WARP_SHUFFLE = [0, 1]
VEC4 = [0, 1]
ONLINE = [0, 1]
UNROLL = [0, 1]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#if WARP_SHUFFLE
__device__ __forceinline__ float warp_reduce(float v, int op) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = op ? v + w : fmaxf(v, w);
    }
    return v;
}
#endif

// op 0: max, op 1: sum. Every thread gets the result.
__device__ float block_reduce(float v, int op, float* red) {
#if WARP_SHUFFLE
    v = warp_reduce(v, op);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : (op ? 0.0f : -INFINITY);
    if (warp == 0) v = warp_reduce(v, op);
    if (threadIdx.x == 0) red[0] = v;
#else
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float w = red[threadIdx.x + s];
            red[threadIdx.x] = op ? red[threadIdx.x] + w : fmaxf(red[threadIdx.x], w);
        }
        __syncthreads();
    }
#endif
    __syncthreads();
    v = red[0];
    __syncthreads();
    return v;
}

template <typename F>
__device__ __forceinline__ void for_each(const float* xr, int cols, F f) {
#if VEC4
    if ((cols & 3) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
#if UNROLL
#pragma unroll 4
#endif
        for (int c = threadIdx.x; c < cols / 4; c += blockDim.x) {
            float4 v = x4[c];
            f(v.x); f(v.y); f(v.z); f(v.w);
        }
        return;
    }
#endif
#if UNROLL
#pragma unroll 4
#endif
    for (int c = threadIdx.x; c < cols; c += blockDim.x) f(xr[c]);
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float red[BLOCK];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
#if ONLINE
    float m = -INFINITY, s = 0.0f;
    for_each(xr, cols, [&](float v) { float mn = fmaxf(m, v); s = s * expf(m - mn) + expf(v - mn); m = mn; });
    float mx = block_reduce(m, 0, red);
    s = s * expf(m - mx);
#else
    float mx = -INFINITY;
    for_each(xr, cols, [&](float v) { mx = fmaxf(mx, v); });
    mx = block_reduce(mx, 0, red);
    float s = 0.0f;
    for_each(xr, cols, [&](float v) { s += expf(v - mx); });
#endif
    float inv = 1.0f / block_reduce(s, 1, red);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - mx) * inv;
}
"""


def softmax_task(template: str | None = TEMPLATE) -> Task:
    """The softmax task with the test template (or none)."""
    return replace(load("softmax"), template_source=template)


def without_baseline(task: Task, folder: Path) -> Task:
    """`task` as `fsr import` would leave it: its folder copied under `folder`, with no
    baseline.cu and no template.cu (loaded from there)."""
    import shutil

    target = folder / task.name
    shutil.copytree(task.directory, target, ignore=shutil.ignore_patterns("baseline.cu", "template.cu"))
    return load(str(target))


def softmax_variants(count: int) -> list[Candidate]:
    """`count` distinct, correct candidates (the softmax baseline at different block sizes)."""
    task = load("softmax")
    base = parse(task.baseline_source, task)
    return [with_defines(base, {"BLOCK": 32 * (i + 1)}) for i in range(count)]


def broken() -> Candidate:
    """A softmax candidate whose header is fine but whose code cannot compile."""
    base = softmax_variants(1)[0]
    return replace(base, source=base.source + "\n#error fsr contract: this must not compile\n")


def timing(median_us: float) -> Timing:
    return Timing(median_us=median_us, p10_us=median_us, p90_us=median_us, min_us=median_us,
                  samples_us=(median_us,), gbps=0.0, tflops=0.0, ceiling_fraction=0.0)


def _unit(text: str) -> float:
    """A deterministic number in [0, 1) from a string."""
    return zlib.crc32(text.encode()) / 2**32


@dataclass
class FakeEvaluator:
    """Latency = base_us / product of the factors of the features detected in a candidate and of
    its (define, value) pairs, times a deterministic +-noise from its id; or `fixed_us` for all.

    Failure modes: `fail_features` maps a feature to the verdict a candidate having it gets;
    `fail_fraction` fails that share of candidates (chosen by id hash) as WRONG; a source
    containing `#error` is a COMPILE_ERROR. `calls` counts evaluations by candidate id.

    Comparators: the baseline is timed at `base_us` (with `baseline=False`, none: what the
    evaluator reports for a task without baseline.cu), PyTorch eager at `torch_us` and
    torch.compile at `compile_us`. With `beside`, as a campaign's worker whose comparators were
    still being timed when its campaign ended: no evaluation carries them, and `compare` times
    them then (fresh); else `compare` answers from what the evaluations carried. `compares`
    records each `compare` call's tasks.

    Certification (a candidate with `certify` set): judged as the screened candidate it names
    (the same latency, the same noise), certified unless it has a feature of `fail_certify`
    (feature -> the set or check that fails: a kernel that keyed on fsr's fixed inputs); a feature
    of `certify_factor` multiplies its certified latency (a kernel slower on fresh inputs).
    """

    base_us: float = 1000.0
    effects: Mapping[str, float] = field(default_factory=dict)
    define_effects: Mapping[tuple[str, int], float] = field(default_factory=dict)
    noise: float = 0.02
    fixed_us: float | None = None
    fail_features: Mapping[str, Verdict] = field(default_factory=dict)
    fail_fraction: float = 0.0
    sleep_s: float = 0.0
    calls: dict[str, int] = field(default_factory=dict)
    baseline: bool = True
    torch_us: float | None = None
    compile_us: float | None = None
    beside: bool = False
    compares: list[tuple[str, ...]] = field(default_factory=list)
    fail_certify: Mapping[str, str] = field(default_factory=dict)
    certify_factor: Mapping[str, float] = field(default_factory=dict)

    def latency_us(self, cand: Candidate, features: frozenset[str] | None = None) -> float:
        if self.fixed_us is not None:
            return self.fixed_us
        factor = math.prod(self.effects.get(f, 1.0) for f in (features or detect(cand)))
        factor *= math.prod(self.define_effects.get(d, 1.0) for d in cand.resolved_defines())
        return self.base_us / factor * (1 + self.noise * (2 * _unit(cand.certify or cand.id) - 1))

    def evaluate(self, cand: Candidate) -> Evaluation:
        self.calls[cand.id] = self.calls.get(cand.id, 0) + 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        features = detect(cand)
        verdict = self._verdict(cand, features)
        tier = Tier.CERTIFY if cand.certify else Tier.SCREEN
        if verdict != Verdict.OK:
            failed = Evaluation(cand.id, cand.task, verdict, message=f"fake {verdict}", device="fake", tier=tier)
            return certification.failure(failed, "compile", failed.message, verdict) if cand.certify else failed
        latency = self.latency_us(cand, features)
        out = Evaluation(cand.id, cand.task, Verdict.OK, timing=timing(latency), device="fake", tier=tier,
                         baseline_us=self.base_us if self.baseline else None,
                         torch_us=None if self.beside else self.torch_us,
                         torch_compile_us=None if self.beside else self.compile_us)
        return self._certify(out, features) if cand.certify else out

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        self.compares.append(tuple(tasks))
        return [Comparison(t, "fake", torch_us=self.torch_us, torch_compile_us=self.compile_us, fresh=self.beside)
                for t in tasks]

    def _certify(self, screened: Evaluation, features: frozenset[str]) -> Evaluation:
        """The certification of a kernel screened as `screened` (its timing as screened)."""
        failing = sorted(features & set(self.fail_certify))
        if failing:
            return certification.failure(screened, self.fail_certify[failing[0]], "fake: 3 of 231 elements wrong",
                                         Verdict.WRONG)
        assert screened.timing is not None
        factor = math.prod(self.certify_factor.get(f, 1.0) for f in features)
        return replace(screened, timing=timing(screened.timing.median_us * factor), certified=True)

    def _verdict(self, cand: Candidate, features: frozenset[str]) -> Verdict:
        if "#error" in cand.source:
            return Verdict.COMPILE_ERROR
        for f in features:
            if f in self.fail_features:
                return self.fail_features[f]
        if self.fail_fraction and _unit("fail" + (cand.certify or cand.id)) < self.fail_fraction:
            return Verdict.WRONG
        return Verdict.OK

    def device(self) -> DeviceInfo:
        return DeviceInfo(name="fake", arch="sm_90")

    def close(self) -> None:
        pass


@dataclass
class ReplayEvaluator:
    """Answers from recorded evaluations (by candidate id); unknown ids fall back to `fallback`."""

    recorded: Mapping[str, Evaluation]
    fallback: FakeEvaluator | None = None

    def evaluate(self, cand: Candidate) -> Evaluation:
        if cand.id in self.recorded:
            return self.recorded[cand.id]
        if self.fallback is None:
            raise KeyError(f"no recorded evaluation for {cand.id}")
        return self.fallback.evaluate(cand)

    def device(self) -> DeviceInfo:
        return DeviceInfo(name="replay", arch="sm_90")

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """Nothing recorded to answer with: no figures, nothing left."""
        return [Comparison(t, "replay") for t in tasks]

    def close(self) -> None:
        pass


class FakeExecutor:
    """Runs an evaluator in-process with `slots` pretend workers. Each evaluation takes
    `eval_s(candidate)` seconds: on a virtual clock (default; `poll` jumps to the next
    completion, so a run is deterministic and instant) or on the real clock (`poll` sleeps).

    GPU models: `models` names the model of each pretend worker (default: one model, the
    evaluator's device). Like the Ray executor, a task stays on one model: the one it is pinned
    to, else the model most workers have, and its evaluations carry that model as their device.
    A task pinned to a model no worker has is refused with EvaluatorUnavailable on submit;
    `pins` records every pin.

    Comparators (`compare`): the evaluator answers, each task's taking `compare_s` seconds on the
    executor's clock, one task after another; the tasks past the bound are left."""

    def __init__(self, evaluator: FakeEvaluator | ReplayEvaluator | None = None, slots: int = 4,
                 eval_s: float | Callable[[Candidate], float] = 0.0, real_time: bool = False,
                 models: Sequence[str] = (), compare_s: float = 0.0) -> None:
        self.evaluator = evaluator or FakeEvaluator()
        self.slots = slots
        self.eval_s = eval_s if callable(eval_s) else (lambda _c, s=float(eval_s): s)
        self.real_time = real_time
        self.models = tuple(models)
        self.virtual_now = 0.0
        self.busy_s = 0.0
        self.started = self._now()
        self.submitted: list[str] = []
        self.pins: dict[str, str] = {}
        self.model_of: dict[str, str] = {}  # task -> the model its candidates run on
        self.compare_s = compare_s
        self.compare_calls: list[tuple[tuple[str, ...], int]] = []  # (tasks, evaluations in flight then)
        self._running: list[tuple[float, int, Candidate]] = []
        self.closed = False

    def _now(self) -> float:
        return time.monotonic() if self.real_time else self.virtual_now

    def free_slots(self) -> int:
        return self.slots - len(self._running)

    def submit(self, candidate: Candidate) -> None:
        if self.free_slots() <= 0:
            raise RuntimeError("no free slot")
        model = self._model_for(candidate.task)
        duration = self.eval_s(candidate)
        self.busy_s += duration
        self.submitted.append(candidate.id)
        self.model_of.setdefault(candidate.task, model)
        heapq.heappush(self._running, (self._now() + duration, len(self.submitted), candidate))

    def poll(self, timeout_s: float) -> list[Evaluation]:
        if not self._running:
            if self.real_time:
                time.sleep(timeout_s)
            return []
        first = self._running[0][0]
        if self.real_time:
            time.sleep(max(0.0, min(first - self._now(), timeout_s)))
        else:
            self.virtual_now = max(self.virtual_now, first)
        done = []
        while self._running and self._running[0][0] <= self._now():
            done.append(heapq.heappop(self._running)[2])
        return [self._evaluate(c) for c in done]

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        self.compare_calls.append((tuple(tasks), len(self._running)))
        answered = int(wait_s // self.compare_s) if self.compare_s > 0 else len(tasks)
        timed = list(tasks)[:answered]
        spent = min(len(tasks) * self.compare_s, wait_s)
        if self.real_time:
            time.sleep(spent)
        else:
            self.virtual_now += spent
        out = self.evaluator.compare(timed, wait_s) if timed else []
        return [*out, *(Comparison(t, left=BOUND_RAN_OUT) for t in list(tasks)[answered:])]

    def close(self) -> None:
        self.closed = True

    def pin(self, task: str, device_name: str) -> None:
        self.pins[task] = device_name

    def workers(self, wait_s: float = 0.0) -> Workers:
        """One fake GPU per slot (the models given, in turn), busy as one pooled worker: the
        evaluations' seconds over the slots' seconds since the start. Evaluations keep an empty
        `worker`: no worker is real."""
        elapsed = self._now() - self.started
        pooled = WorkerStats("fake", "ready", "", len(self._running), len(self.submitted), 0, 0, 0,
                             min(self.busy_s, elapsed * self.slots), elapsed * self.slots)
        return Workers(self._devices(), (pooled,))

    def _devices(self) -> dict[str, DeviceInfo]:
        device = self.evaluator.device()
        models = self.models or (device.name,)
        return {f"fake{i}": replace(device, name=models[i % len(models)]) for i in range(self.slots)}

    def _model_for(self, task: str) -> str:
        """The task's model: fixed at its first submit (by its pin, else the commonest model)."""
        if task in self.model_of:
            return self.model_of[task]
        models = [d.name for d in self._devices().values()]
        model = self.pins.get(task) or max(models, key=models.count)
        if model not in models:
            raise EvaluatorUnavailable(f"task {task!r} is pinned to GPU model {model!r}; "
                                       f"the workers have {sorted(set(models))}")
        return model

    def _evaluate(self, candidate: Candidate) -> Evaluation:
        evaluation = self.evaluator.evaluate(candidate)
        return replace(evaluation, device=self.model_of[candidate.task]) if self.models else evaluation


@dataclass
class ListWriter:
    """A lineage sink that keeps (candidate, evaluation, extra) in memory."""

    rows: list[tuple[Candidate, Evaluation, dict]] = field(default_factory=list)
    flushes: int = 0

    def append(self, candidate: Candidate, evaluation: Evaluation, **extra: object) -> None:
        self.rows.append((candidate, evaluation, extra))

    def flush(self) -> None:
        self.flushes += 1


if TYPE_CHECKING:  # mypy holds the doubles to the protocols they stand in for
    _doubles: tuple[Executor, Evaluator, Evaluator] = (FakeExecutor(), FakeEvaluator(), ReplayEvaluator({}))
