"""What the judge's work around each timed sample costs on this GPU, for one task: device time per
sample, outside the timed region, of
- `flush before`: the L2 flush before the eviction-priority work (a write of a buffer twice the
  L2, then a plain read of it: `L2Flusher.clean`);
- `flush as merged`: the flush first merged for issue 40 (the write, then the evict_last read and
  the demotion of the buffer's lines);
- `flush now`: `L2Flusher.flush` (the evict_last read, the demotion, the write, the plain read);
- `priority half`: its evict_last read and demotion alone (`L2Flusher.age_out`);
- `scrub`: the scrub of local and shared memory (fsr.evaluate.gpu.scrub) at the frame of the
  task's baseline.

Each is queued COUNT times back to back behind a hold (so the host's queueing is not timed),
between two CUDA events; a round's time over COUNT is one reading, and the line gives the median
of ROUNDS rounds and their spread. One line each.

    python bench/judge_cost.py TASK [--count 20] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/judge_cost.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", help="a task name or directory; its baseline.cu sets the scrub's frame")
    parser.add_argument("--count", type=int, default=20, help="repetitions a round (default 20)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per line (default 7)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.rounds < 1:
        parser.error("--count and --rounds must be at least 1")
    return args


def per_sample_us(work: Callable[[], None], stream: Any, hold: Any, count: int,
                  rounds: int) -> tuple[list[float], int]:
    """Device microseconds of one `work()`, one reading a round, and how many rounds' holds
    expired (the host took longer than the hold waits: those readings may hold host time)."""
    import cupy as cp

    work()  # first call: module loads and allocations stay out of the readings
    stream.synchronize()
    readings, expired = [], 0
    for _ in range(rounds):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        hold.reset(stream)
        ticket = hold.hold(stream, 0)
        start.record(stream)
        for _ in range(count):
            work()
        end.record(stream)
        hold.release(ticket)
        stream.synchronize()
        expired += int(hold.expired_slots(1)[0])
        readings.append(cp.cuda.get_elapsed_time(start, end) * 1000.0 / count)
    return readings, expired


def baseline_program(task: Any, arch: str) -> Any:
    """The task's baseline, compiled here (trusted code) and loaded."""
    from fsr import candidate
    from fsr.evaluate.compile import CompileService
    from fsr.evaluate.gpu.programs import Program

    compiled = CompileService().compile(candidate.parse(task.baseline_source, task), arch)
    return Program(compiled.cubin, compiled.lowered)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    from fsr import tasks

    try:
        task = tasks.load(args.task)
    except tasks.TaskError as e:  # an unknown task or a broken task.toml: one line
        print(f"judge_cost: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if not task.baseline_source:
        print(f"judge_cost: error: task {task.name} has no baseline.cu to size the scrub's frame",
              file=sys.stderr)
        return 2
    import cupy as cp

    from fsr.evaluate.gpu import ceilings, scrub, timing

    try:
        info = ceilings.device_info()
    except cp.cuda.runtime.CUDARuntimeError as e:
        print(f"judge_cost: error: no usable CUDA device ({' '.join(str(e).split())})", file=sys.stderr)
        return 2
    stream = cp.cuda.Stream(non_blocking=True)
    hold, flusher = timing.Hold(), timing.L2Flusher(info.l2_bytes)
    program = baseline_program(task, info.arch)
    stack = int(cp.cuda.runtime.deviceGetLimit(cp.cuda.runtime.cudaLimitStackSize))
    frame = scrub.frame_bytes(program.local_bytes(), stack)

    def as_merged() -> None:
        cp.cuda.runtime.memsetAsync(flusher.buffer.data.ptr, 1, flusher.buffer.nbytes, stream.ptr)
        flusher.age_out(stream)

    work: dict[str, Callable[[], None]] = {
        "flush before": lambda: flusher.clean(stream),
        "flush as merged": as_merged,
        "flush now": lambda: flusher.flush(stream),
        "priority half": lambda: flusher.age_out(stream),
        f"scrub ({frame} B frame)": lambda: scrub.scrub(program, stream),
    }
    print(f"{info.name}: L2 {info.l2_bytes >> 20} MiB, flush buffer {flusher.buffer.nbytes >> 20} MiB; "
          f"task {task.name} "
          f"(baseline local memory {program.local_bytes()} B a thread, stack limit {stack} B); "
          f"{args.rounds} rounds of {args.count}")
    for name, run in work.items():
        readings, expired = per_sample_us(run, stream, hold, args.count, args.rounds)
        note = f"; {expired} rounds' holds expired (host time may be in them)" if expired else ""
        print(f"{name:28s} {statistics.median(readings):9.1f} us a sample "
              f"(rounds {min(readings):.1f}-{max(readings):.1f}){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
