"""A candidate's timed runs at the benchmark size, each prepared as a checked launch is and each
checked: the state-reset and timed-output-check defences (README, "How it is checked").

Before every timed run, outside the timed region and before the L2 flush: its input set's outputs
poisoned (or, for the runs fsr.evaluate.gpu.sample_plan picks, filled with a decoy), non-zeroed
scratch poisoned, zeroed scratch zeroed and the module's `__device__` variables restored. After
every run, after its end event: its outputs compared on the device with the set's expected
outputs (kept on the device since the task was prepared), into the run's counter slot. The
counters come back once, after timing; a mismatch is WRONG, with the run it happened in.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass

import cupy as cp
import numpy as np

from fsr.evaluate.gpu.buffers import PAD_BYTES, POISON, Guarded, broken_canaries, scratch_buffers
from fsr.evaluate.gpu.inputs import TaskState
from fsr.evaluate.gpu.narrow import LOW_PRECISION_SOURCE
from fsr.evaluate.gpu.programs import Program, enqueue, plan
from fsr.evaluate.gpu.sample_plan import SLOTS, SamplePlan, describe, spoil_seed
from fsr.evaluate.gpu.verify import Expected
from fsr.types import Candidate, SizeCheck

SPOIL_MASK = 63  # a decoy spoils one element in 64 (at random): every tile, row or chunk has some
GRID_BLOCKS = 1024
C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long",
           "uint32": "unsigned int", "uint8": "unsigned char", "int8": "signed char", "int16": "short",
           "bfloat16": "fsr_bf16", "float16": "fsr_f16", "float8_e4m3fn": "fsr_e4m3", "float8_e5m2": "fsr_e5m2"}

CHECK_SOURCE = LOW_PRECISION_SOURCE + r"""
__device__ __forceinline__ unsigned long long fsr_mix(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Expected values and bounds live on the device veiled: each word XORed with a stream from two
// secret keys that only fsr's own launches receive, so a kernel that reads memory outside its
// buffers finds no answer to copy (nor |answer| in the bounds).
__device__ __forceinline__ unsigned long long fsr_veil_word(unsigned long long i, unsigned long long salt,
                                                            unsigned long long k1, unsigned long long k2) {
    return fsr_mix(fsr_mix(k1 ^ (2 * i + salt)) + k2);
}
__device__ __forceinline__ float fsr_unveil(float v, unsigned long long w) { return __uint_as_float(__float_as_uint(v) ^ (unsigned)w); }
__device__ __forceinline__ double fsr_unveil(double v, unsigned long long w) {
    return __longlong_as_double(__double_as_longlong(v) ^ (long long)w);
}

template <typename V>
__global__ void fsr_veil(V* a, long long n, unsigned long long salt, unsigned long long k1, unsigned long long k2) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        a[i] = fsr_unveil(a[i], fsr_veil_word(i, salt, k1, k2));
}

// Elements where |got - value| <= bound fails (NaN included) are counted into *bad: in V's
// arithmetic, as verify.compare does on the host (got cast to V, one rounded subtraction).
template <typename T, typename V>
__global__ void fsr_count_bad(const T* got, const V* value, const V* bound, long long n, unsigned int* bad,
                              unsigned long long k1, unsigned long long k2) {
    unsigned int mine = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const V d = (V)got[i] - fsr_unveil(value[i], fsr_veil_word(i, 0, k1, k2));
        const V magnitude = d < (V)0 ? -d : d;
        if (!(magnitude <= fsr_unveil(bound[i], fsr_veil_word(i, 1, k1, k2)))) ++mine;
    }
    if (mine) atomicAdd(bad, mine);
}

// A position-sensitive digest of a buffer's words (a permutation changes it).
extern "C" __global__ void fsr_fingerprint(const unsigned int* words, long long n, unsigned long long* out) {
    unsigned long long mine = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        mine += fsr_mix(((unsigned long long)i << 32) ^ words[i]);
    atomicAdd(out, mine);
}

// The right answer with one element in (mask + 1) spoiled by 1 + 2|v| + 4 bound: finite for any
// answer a task has and outside its tolerance (bound: that element's, however its floor set it).
template <typename T, typename V>
__global__ void fsr_decoy(const V* value, const V* bound, T* out, long long n, unsigned long long seed,
                          unsigned long long mask, unsigned long long k1, unsigned long long k2) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        double v = (double)fsr_unveil(value[i], fsr_veil_word(i, 0, k1, k2));
        if ((fsr_mix(seed ^ (unsigned long long)i) & mask) == 0) {
            const double b = (double)fsr_unveil(bound[i], fsr_veil_word(i, 1, k1, k2));
            v = fsr_spoiled(v, 1.0 + 2.0 * fabs(v) + 4.0 * b, out);
        }
        out[i] = (T)v;
    }
}
"""


@functools.cache
def _kernels(got: str, value: str) -> tuple[cp.RawKernel, cp.RawKernel]:
    """The count and decoy kernels for an output dtype and its expected values' dtype."""
    t, v = C_TYPES[got], C_TYPES[value]
    names = (f"fsr_count_bad<{t}, {v}>", f"fsr_decoy<{t}, {v}>")
    module = cp.RawModule(code=CHECK_SOURCE, options=("-std=c++17",), name_expressions=names)
    return module.get_function(names[0]), module.get_function(names[1])


def prepare_checks(got: str, value: str) -> None:
    """Compile (or load from cupy's cache) the check and decoy kernels for an output dtype."""
    _kernels(got, value)


@functools.cache
def _fingerprint_kernel() -> cp.RawKernel:
    return cp.RawModule(code=CHECK_SOURCE, options=("-std=c++17",)).get_function("fsr_fingerprint")


@functools.cache
def _veil_kernel(value: str) -> cp.RawKernel:
    name = f"fsr_veil<{C_TYPES[value]}>"
    return cp.RawModule(code=CHECK_SOURCE, options=("-std=c++17",), name_expressions=(name,)).get_function(name)


def fingerprints(buffers: dict[str, Guarded], stream: cp.cuda.Stream) -> list[int]:
    """A digest of each buffer's bytes (whole 4-byte words; a trailing part is not covered), in
    order: one kernel each on `stream`, one copy back."""
    with stream:
        out = cp.zeros(max(len(buffers), 1), dtype=cp.uint64)
        for k, g in enumerate(buffers.values()):
            words = g.raw[PAD_BYTES:PAD_BYTES + g.nbytes // 4 * 4].view(cp.uint32)
            _fingerprint_kernel()((GRID_BLOCKS,), (256,), (words, np.int64(words.size),
                                                           np.uint64(out.data.ptr + 8 * k)), stream=stream)
        return [int(v) for v in out.get(stream=stream)[:len(buffers)]]


@dataclass(frozen=True)
class DeviceExpected:
    """One output's expected values and allowed deviations on the device, veiled with `keys`
    (held in host memory; only fsr's check and decoy launches get them)."""

    value: cp.ndarray
    bound: cp.ndarray
    keys: tuple[int, int]

    @classmethod
    def upload(cls, expected: Expected, stream: cp.cuda.Stream) -> DeviceExpected:
        keys = (secrets.randbits(64), secrets.randbits(64))
        with stream:
            out = cls(cp.asarray(expected.value), cp.asarray(expected.bound), keys)
            for salt, a in enumerate((out.value, out.bound)):
                _veil_kernel(a.dtype.name)((GRID_BLOCKS,), (256,), (a, np.int64(a.size), np.uint64(salt),
                                                                    np.uint64(keys[0]), np.uint64(keys[1])),
                                           stream=stream)
        return out


class TimedRuns:
    """`run(i)`, `before(i)` and `after(i)` for bench.sample on a task's benchmark sets (set i
    mod their number), and `verdict()` once the stream has finished. `samples` says which runs
    start from a decoy (none in tuning trials: their outputs are still checked after every run)."""

    def __init__(self, state: TaskState, cand: Candidate, program: Program, stream: cp.cuda.Stream,
                 samples: SamplePlan):
        """Raises LaunchRefused."""
        self.task, self.sets = state.task, state.sets
        self.cand, self.program, self.stream, self.plan = cand, program, stream, samples
        size = dict(state.task.bench_size)
        with stream:  # in order with the runs: fsr's stream does not wait for the default one
            self.scratch = scratch_buffers(cand, size)  # one for every set: reset before every run
            self.bad = cp.zeros(SLOTS, dtype=cp.uint32)
        self.launches = [plan(program, cand, state.task, size,
                              {k: g.array for k, g in (s.buffers.inputs | s.buffers.outputs | self.scratch).items()})
                         for s in state.sets]
        self.slot = 0

    def run(self, i: int) -> None:
        enqueue(self.launches[i % len(self.launches)], self.stream)

    def regions(self) -> list[tuple[int, int]]:
        """(device address, bytes) of every allocation the runs' launches receive, canaries
        included: what certification's flush sets back to the default L2 priority."""
        guarded = [g for s in self.sets for g in s.buffers.all().values()] + list(self.scratch.values())
        return [(g.raw.data.ptr, g.raw.nbytes) for g in guarded]

    def before(self, i: int) -> None:
        """The state of a checked launch (or a decoy in the outputs), queued before the flush."""
        self.slot, run = self.plan.start(i)
        bench_set = self.sets[run.input_set]
        for name, g in bench_set.buffers.outputs.items():
            if run.decoy:
                self._decoy(g, bench_set.expected[name])
            else:
                cp.cuda.runtime.memsetAsync(g.array.data.ptr, POISON, g.nbytes, self.stream.ptr)
        for s in self.cand.scratch:
            g = self.scratch[s.name]
            cp.cuda.runtime.memsetAsync(g.array.data.ptr, 0 if s.zero else POISON, g.nbytes, self.stream.ptr)
        self.program.reset_globals(self.stream)

    def after(self, i: int) -> None:
        """The run's outputs compared with the set's expected ones, into its counter slot."""
        bench_set = self.sets[i % len(self.sets)]
        for name, g in bench_set.buffers.outputs.items():
            want = bench_set.expected[name]
            count, _ = _kernels(g.dtype.name, want.value.dtype.name)
            count((GRID_BLOCKS,), (256,), (g.array, want.value, want.bound, np.int64(g.array.size),
                                          np.uint64(self.bad.data.ptr + 4 * self.slot), np.uint64(want.keys[0]),
                                          np.uint64(want.keys[1])), stream=self.stream)

    def _decoy(self, g: Guarded, want: DeviceExpected) -> None:
        _, decoy = _kernels(g.dtype.name, want.value.dtype.name)
        decoy((GRID_BLOCKS,), (256,), (want.value, want.bound, g.array, np.int64(g.array.size), np.uint64(spoil_seed()),
                                       np.uint64(SPOIL_MASK), np.uint64(want.keys[0]), np.uint64(want.keys[1])),
              stream=self.stream)

    def verdict(self) -> SizeCheck | None:
        """None if every timed run's outputs matched and left every input and canary as it was,
        else the failed check naming what happened."""
        for k, bench_set in enumerate(self.sets):
            if fingerprints(bench_set.buffers.inputs, self.stream) != bench_set.fingerprints:
                return SizeCheck(self.task.bench_size, False, 0.0,
                                 f"in a timed run, the inputs of input set {k} were modified (inputs are read-only)")
            with self.stream:
                broken = broken_canaries(bench_set.buffers.all() | self.scratch)
            if broken:
                return SizeCheck(self.task.bench_size, False, 0.0,
                                 f"in a timed run, the kernel wrote outside buffer {broken[0]} (canary region changed)")
        with self.stream:
            counts = self.bad.get(stream=self.stream).tolist()
        found = self.plan.first_wrong(counts)
        if found is None:
            return None
        run, wrong, shared = found
        total = sum(g.array.size for g in self.sets[run.input_set].buffers.outputs.values())
        return SizeCheck(self.task.bench_size, False, 0.0, describe(run, wrong, total, shared))
