"""Why the reference loop of tests/gpu/test_timing.py reads an ~8 us kernel at about 8.1 us in
some loops and 8.6-8.8 us in others: rounds of the loop, fsr's protocol and two loop variants,
with the GPU's clocks, power and temperature sampled by nvidia-smi every 50 ms meanwhile.

    python bench/timing_modes.py [ROUNDS]

Per round and variant: the median, the 10th and 90th percentiles, the medians of the first and
last 50 samples (a loop that drifts shows there), and the SM and memory clocks and power seen
while it ran. Variants: `ref` (the test's loop: 200 samples queued behind a 100 ms one-thread
busy kernel), `fsr` (bench.sample as the test calls it), `ref_64` (the loop with 64 samples),
`ref_wide` (the loop behind a 100 ms busy kernel on every SM, so the GPU is under load when the
samples start).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ beside fsr/

from fsr.evaluate import bench  # noqa: E402
from tests.gpu.test_timing import SOURCE as TEST_SOURCE  # noqa: E402

SOURCE = TEST_SOURCE + r"""
extern "C" __global__ void busy_all(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    float v = threadIdx.x;
    do {
        for (int k = 0; k < 64; ++k) v = v * 0.999f + 0.5f;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
    if (v == 12345.0f) asm volatile("trap;");
}
"""
QUERY = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


def main(rounds: int) -> None:
    module = cp.RawModule(code=SOURCE)
    stream = cp.cuda.Stream(non_blocking=True)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    sms, n = props["multiProcessorCount"], 1 << 20
    x = cp.random.default_rng(0).random(64 << 20, dtype=cp.float32)
    y = cp.empty_like(x)
    flusher, hold = bench.L2Flusher(int(props["l2CacheSize"])), bench.Hold()
    kernel, busy, busy_all = (module.get_function(k) for k in ("stream_scale", "busy_wait", "busy_all"))
    grid = (min((n + 255) // 256, sms * 16),)

    def run(_: int = 0) -> None:
        kernel(grid, (256,), (x, y, np.int64(n), np.int32(0)), stream=stream)

    def loop(count: int = 200, wide: bool = False) -> list[float]:
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
        run()
        stream.synchronize()
        if wide:
            busy_all((sms * 4,), (256,), (np.uint64(100_000_000),), stream=stream)
        else:
            busy((1,), (1,), (np.uint64(100_000_000),), stream=stream)
        for b, e in events:
            flusher.flush(stream)
            b.record(stream)
            run()
            e.record(stream)
        stream.synchronize()
        return [cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]

    def fsr() -> list[float]:
        return bench.sample(run, stream, flusher, budget_s=0.15, min_samples=30, max_samples=200, warmup_s=0.03,
                            hold=hold)

    variants = {"ref": loop, "fsr": fsr, "ref_64": lambda: loop(64), "ref_wide": lambda: loop(wide=True)}
    log = Path(tempfile.mkdtemp()) / "smi.csv"
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=log.open("w"), stderr=subprocess.DEVNULL)
    windows = []
    try:
        time.sleep(0.3)
        for r in range(rounds):
            for name, variant in variants.items():
                began = time.time()
                samples = variant()
                windows.append((r, name, began, time.time(), samples))
        time.sleep(0.2)
    finally:
        smi.terminate()
        smi.wait()
    clocks = []
    for line in log.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + parts[0].split(".")[1])
            clocks.append((stamp, float(parts[1]), float(parts[2]), float(parts[3]), float(parts[4]), parts[5]))
        except (IndexError, ValueError):
            continue
    print(f"{props['name'].decode() if isinstance(props['name'], bytes) else props['name']}, {len(clocks)} clock samples")
    print("| round | variant | n | median | p10 | p90 | first 50 | last 50 | SM MHz | mem MHz | W | C | reasons |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r, name, began, ended, samples in windows:
        s = np.asarray(samples)
        seen = [c for c in clocks if began - 0.05 <= c[0] <= ended + 0.05]
        sm = f"{min(c[1] for c in seen):.0f}-{max(c[1] for c in seen):.0f}" if seen else "-"
        mem = f"{min(c[2] for c in seen):.0f}-{max(c[2] for c in seen):.0f}" if seen else "-"
        watts = f"{max(c[3] for c in seen):.0f}" if seen else "-"
        temp = f"{max(c[4] for c in seen):.0f}" if seen else "-"
        reasons = ",".join(sorted({c[5] for c in seen})) if seen else "-"
        print(f"| {r} | {name} | {len(s)} | {np.median(s):.3f} | {np.percentile(s, 10):.3f} | {np.percentile(s, 90):.3f} "
              f"| {np.median(s[:50]):.3f} | {np.median(s[-50:]):.3f} | {sm} | {mem} | {watts} | {temp} | {reasons} |")
    for name in variants:
        meds = [float(np.median(w[4])) for w in windows if w[1] == name]
        print(f"{name}: medians {' '.join(f'{m:.2f}' for m in meds)}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
