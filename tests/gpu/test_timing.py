"""Timing fidelity on a real GPU: fsr's protocol against a bare CUDA-events loop whose launches
are all queued while the GPU is still busy (so no host time can enter it), for kernels of about
8 us, 130 us and 1 ms, in paired rounds (`against_loop`); and a host-side pause between a
candidate's launches never enters the timed region. Marked `whole_machine`: bounds of 2% on a
timing protocol are checked with nothing else on the machine (under pytest-xdist with other
workers beside it, this module skips: run `pytest -m whole_machine` alone)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.whole_machine]
TOLERANCE = 0.02
PAUSED_TOLERANCE = 0.10  # a GPU idle between chunks of samples; a timed pause would add 7700%

SOURCE = r"""
extern "C" __global__ void stream_scale(const float* x, float* y, long long n, int reps) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        for (int r = 0; r < reps; ++r) v = v * 0.999f + 0.25f;
        y[i] = v;
    }
}

extern "C" __global__ void busy_wait(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from fsr.evaluate.gpu import timing as bench

    module = cp.RawModule(code=SOURCE)
    stream = cp.cuda.Stream(non_blocking=True)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    x = cp.random.default_rng(0).random(64 << 20, dtype=cp.float32)  # 256 MB
    y = cp.empty_like(x)
    return {"cp": cp, "bench": bench, "module": module, "stream": stream, "x": x, "y": y,
            "flusher": bench.L2Flusher(int(props["l2CacheSize"])), "hold": bench.Hold(), "sms": props["multiProcessorCount"]}


def launcher(gpu, n: int, reps: int) -> Callable[[], None]:
    kernel = gpu["module"].get_function("stream_scale")
    grid = (min((n + 255) // 256, gpu["sms"] * 16),)

    def launch() -> None:
        kernel(grid, (256,), (gpu["x"], gpu["y"], np.int64(n), np.int32(reps)), stream=gpu["stream"])

    return launch


def reference_us(gpu, run: Callable[[], None], count: int = 200, loops: int = 3) -> float:
    """The fastest of `loops` bare events loops' medians: in each, every flush, event and launch
    is queued behind a 100 ms busy kernel, so the GPU finds each sample's launches already
    waiting."""
    return min(_loop_us(gpu, run, count) for _ in range(loops))


ROUNDS = 5


def against_loop(gpu, run: Callable[[], None], measure: Callable[[], float]) -> tuple[float, list[tuple[float, float]]]:
    """fsr's reading over the reference loop's, in ROUNDS rounds of a loop and then `measure()`,
    back to back: the median of the rounds' ratios, and the (fsr, loop) pairs. Host time entering
    fsr's samples raises every round's ratio (by 7-16% in bench/timing_probe.py's variants that
    queue host work meanwhile)."""
    pairs = []
    for _ in range(ROUNDS):
        reference = _loop_us(gpu, run, 200)
        pairs.append((measure(), reference))
    return float(np.median([m / r for m, r in pairs])), pairs


def assert_no_host_time(ratio: float, pairs: list[tuple[float, float]]) -> None:
    """fsr's median ratio to the loop within 2% either way: host time would raise it, a launch
    left out of the region would lower it. (Behind a flush that left dirty lines in the L2, the
    loop itself read an 8 us kernel 8.2 or 8.6-8.9 us from loop to loop on an H200: the flush now
    leaves the L2 clean, see fsr.evaluate.gpu.timing.L2Flusher.)"""
    assert abs(ratio - 1) < TOLERANCE, show(pairs)


def show(pairs: list[tuple[float, float]]) -> str:
    return "fsr / loop by round: " + ", ".join(f"{m:.2f} / {r:.2f} us" for m, r in pairs)


def _loop_us(gpu, run: Callable[[], None], count: int) -> float:
    cp, stream = gpu["cp"], gpu["stream"]
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
    run()
    stream.synchronize()
    gpu["module"].get_function("busy_wait")((1,), (1,), (np.uint64(100_000_000),), stream=stream)
    for begin, end in events:
        gpu["flusher"].flush(stream)
        begin.record(stream)
        run()
        end.record(stream)
    stream.synchronize()
    return float(np.median([cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]))


def fsr_us(gpu, run: Callable[[], None], hold: bool = True) -> float:
    samples = gpu["bench"].sample(lambda _: run(), gpu["stream"], gpu["flusher"], budget_s=0.15, min_samples=30,
                                  max_samples=200, warmup_s=0.03, hold=gpu["hold"] if hold else None)
    return float(np.median(samples))


def sized_for(gpu, target_us: float) -> Callable[[], None]:
    """A streaming kernel near `target_us`: 8 MB, 512 MB, or 512 MB with arithmetic added."""
    if target_us < 50:
        return launcher(gpu, 1 << 20, 0)
    if target_us < 500:
        return launcher(gpu, 64 << 20, 0)
    reps = 16
    while reference_us(gpu, launcher(gpu, 64 << 20, reps), count=5, loops=1) < 0.8 * target_us and reps < 1 << 14:
        reps *= 2
    return launcher(gpu, 64 << 20, reps)


@pytest.mark.parametrize("target_us", [8, 130, 1000])
def test_fsr_timing_matches_a_loop_with_no_host_time_in_it(gpu, target_us):
    run = sized_for(gpu, target_us)
    ratio, pairs = against_loop(gpu, run, lambda: fsr_us(gpu, run))
    assert_no_host_time(ratio, pairs)


@pytest.mark.parametrize("target_us", [8, 130, 1000])
def test_the_default_protocol_matches_the_loop_and_repeats(gpu, target_us):
    """With the evaluator's defaults (first round, early stop at the median's standard error,
    budget), twice: each within 2% of the reference loop, and of each other."""
    from fsr.config import EvalConfig

    cfg, run = EvalConfig(), sized_for(gpu, target_us)

    def default() -> float:
        return float(np.median(gpu["bench"].sample(
            lambda _: run(), gpu["stream"], gpu["flusher"], budget_s=cfg.bench_budget_s,
            min_samples=cfg.bench_min_samples, max_samples=cfg.bench_max_samples, warmup_s=cfg.warmup_s,
            hold=gpu["hold"], rel_error=cfg.bench_rel_error)))

    ratio, pairs = against_loop(gpu, run, default)
    assert_no_host_time(ratio, pairs)
    medians = [default(), default()]
    assert abs(medians[0] - medians[1]) / medians[0] < TOLERANCE, f"fsr {medians} us"


@pytest.mark.parametrize("target_us", [8, 1000])
def test_a_tuning_winner_timed_without_a_second_warm_up_matches_the_loop(gpu, target_us):
    """The tuning path: a trial's short protocol, then the full protocol with the time per run
    from the trial instead of a warm-up; and a trial far slower than the best stops after one
    sample."""
    bench, run = gpu["bench"], sized_for(gpu, target_us)

    def winner() -> float:
        trial = bench.sample_trial(lambda _: run(), gpu["stream"], gpu["flusher"], budget_s=0.05, max_samples=4,
                                   best_us=None, stop_ratio=1.1, cut_ratio=1.5, hold=gpu["hold"])
        assert len(trial) >= 2
        samples = bench.sample(lambda _: run(), gpu["stream"], gpu["flusher"], budget_s=0.15, min_samples=30,
                               max_samples=200, warmup_s=0.03, hold=gpu["hold"],
                               per_run_s=float(np.median(trial)) * 1e-6)
        return float(np.median(samples))

    ratio, pairs = against_loop(gpu, run, winner)
    assert_no_host_time(ratio, pairs)
    cut = bench.sample_trial(lambda _: run(), gpu["stream"], gpu["flusher"], budget_s=0.05, max_samples=4,
                             best_us=pairs[0][1] / 2, stop_ratio=1.1, cut_ratio=1.5, hold=gpu["hold"])
    assert len(cut) == 1


def test_a_host_pause_between_launches_stays_out_of_the_timed_region(gpu):
    launch = launcher(gpu, 1 << 20, 0)

    def two_launches_with_a_pause() -> None:
        launch()
        time.sleep(0.001)  # the host is slow between a candidate's two launches
        launch()

    def two_launches() -> None:
        launch()
        launch()

    reference = reference_us(gpu, two_launches)
    measured = fsr_us(gpu, two_launches_with_a_pause)
    # Host time in the region would add the whole pause (1000 us) to a 13 us sample: the bound
    # that matters is the upper one, and it is loose, since with the host this slow the GPU idles
    # between chunks of samples (about 4 ms each) and such a GPU runs these samples a few percent
    # off the busy loop's time either way (5.5% fast, 3.8% slow on H200s). The lower bound checks
    # that both launches are inside the region (one launch alone is about 35% less).
    assert measured < reference * (1 + PAUSED_TOLERANCE), f"fsr {measured:.2f} us, reference {reference:.2f} us"
    assert measured > reference * 0.9, f"fsr {measured:.2f} us, reference {reference:.2f} us"
    # without the hold the pause is timed: the check above is one that can fail
    assert fsr_us(gpu, two_launches_with_a_pause, hold=False) > reference + 500.0


def test_a_run_that_waits_on_its_stream_is_timed_without_holding(gpu):
    """A comparator that synchronises inside its run would wait on the hold: fsr notices during
    warm-up and times it unheld instead of deadlocking, in about the time of the same protocol on
    the run without the wait plus as many bare calls of the waiting run as it takes samples."""
    launch, stream = launcher(gpu, 1 << 20, 0), gpu["stream"]

    def launch_and_wait() -> None:
        launch()
        stream.synchronize()

    started = time.perf_counter()
    fsr_us(gpu, launch)  # the same protocol, on the run that does not wait
    reference_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(200):  # fsr_us's most samples
        launch_and_wait()
    bare_s = time.perf_counter() - started
    started = time.perf_counter()
    measured = fsr_us(gpu, launch_and_wait)
    elapsed = time.perf_counter() - started
    assert measured > 0 and elapsed < 2 * (reference_s + bare_s), \
        f"{elapsed:.2f} s against {reference_s:.2f} s unwaited and {bare_s:.2f} s of bare calls"
