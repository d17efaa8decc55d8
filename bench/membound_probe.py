"""The memory-bound templates' newer switches (L2 eviction hints, chunked loads, rows held in
registers, bfloat16's 16-byte packs) against the search's earlier best, at the benchmark size on
one GPU: each combination's verdict (judged at every test size first, so one that is not OK says
where it failed), its median latency over `--rounds` evaluations (the median of each one's L2-flushed
samples, evaluations interleaved across the combinations so drift spreads over all), the spread of
those medians, and its ratio to torch.compile, to PyTorch eager and to the copy-rate ceiling. No
tuning. A ratio over 1.00x is faster than the comparator.

    python bench/membound_probe.py                    # layernorm, rmsnorm, rmsnorm_bf16, gemv
    python bench/membound_probe.py rmsnorm gemv       # those tasks only
    python bench/membound_probe.py --rounds 5 layernorm
    python bench/membound_probe.py --plans occupancy  # plain two passes at 512 threads, against the held row
    python bench/membound_probe.py --plans stores     # y stored plainly (as Inductor) or evict_first
    python bench/membound_probe.py --plans inductor   # Inductor's shape, 512 threads, at 2 to 4 blocks an SM
    python bench/membound_probe.py --plans lean       # the norms' LEAN kernels around that shape
    python bench/membound_probe.py --plans held       # LEAN with the row held in registers (REG_ROW)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Evaluation, Verdict, WorkerSpec

# The search's best on an H200 at 24 evaluations a task (2026-11-28), the base of each hypothesis.
RMS_BEST = {"BLOCK": 256, "VEC4": 1, "UNROLL": 1, "WARP_SHUFFLE": 1}
BF16_BEST = RMS_BEST | {"FAST_MATH": 1}
LN_BEST = {"BLOCK": 256, "VEC4": 1, "UNROLL": 1}
GEMV_BEST = {"BLOCK": 256, "LAUNCH_BOUNDS": 1, "REG_BLOCK": 1, "RW": 2, "UNROLL": 1, "VEC4": 1, "WARP_SHUFFLE": 1}

PLANS: dict[str, list[tuple[str, dict[str, int]]]] = {
    "rmsnorm": [
        ("earlier best (VEC4 UNROLL WARP_SHUFFLE)", RMS_BEST),
        ("+ EVICT_HINT (x re-read from L2)", RMS_BEST | {"EVICT_HINT": 1}),
        ("+ CHUNK (loads batched)", RMS_BEST | {"CHUNK": 1}),
        ("+ EVICT_HINT + CHUNK (Triton's shape)", RMS_BEST | {"EVICT_HINT": 1, "CHUNK": 1}),
        ("+ REG_ROW (x read once)", RMS_BEST | {"REG_ROW": 1}),
        ("+ REG_ROW + EVICT_HINT", RMS_BEST | {"REG_ROW": 1, "EVICT_HINT": 1}),
        ("+ REG_ROW + EVICT_HINT, 512 threads", RMS_BEST | {"REG_ROW": 1, "EVICT_HINT": 1, "BLOCK": 512, "REG_VECS": 4}),
        ("+ every new switch", RMS_BEST | {"EVICT_HINT": 1, "CHUNK": 1, "REG_ROW": 1, "WIDE": 1}),
    ],
    "rmsnorm_bf16": [
        ("earlier best (VEC4 UNROLL WARP_SHUFFLE FAST_MATH)", BF16_BEST),
        ("+ WIDE (16-byte packs)", BF16_BEST | {"WIDE": 1}),
        ("+ EVICT_HINT", BF16_BEST | {"EVICT_HINT": 1}),
        ("+ WIDE + EVICT_HINT", BF16_BEST | {"WIDE": 1, "EVICT_HINT": 1}),
        ("+ WIDE + EVICT_HINT + CHUNK", BF16_BEST | {"WIDE": 1, "EVICT_HINT": 1, "CHUNK": 1}),
        ("+ WIDE + REG_ROW", BF16_BEST | {"WIDE": 1, "REG_ROW": 1, "REG_VECS": 4}),
        ("+ WIDE + REG_ROW + EVICT_HINT", BF16_BEST | {"WIDE": 1, "REG_ROW": 1, "REG_VECS": 4, "EVICT_HINT": 1}),
        ("+ every new switch", BF16_BEST | {"EVICT_HINT": 1, "CHUNK": 1, "REG_ROW": 1, "WIDE": 1}),
    ],
    "layernorm": [
        ("earlier best (two passes, VEC4 UNROLL)", LN_BEST),
        ("+ EVICT_HINT", LN_BEST | {"EVICT_HINT": 1}),
        ("+ EVICT_HINT + CHUNK (two passes)", LN_BEST | {"EVICT_HINT": 1, "CHUNK": 1}),
        ("+ ONLINE + CHUNK (chunked Welford)", LN_BEST | {"ONLINE": 1, "CHUNK": 1}),
        ("+ ONLINE + CHUNK + EVICT_HINT (Triton's shape)", LN_BEST | {"ONLINE": 1, "CHUNK": 1, "EVICT_HINT": 1}),
        ("+ REG_ROW (x read once)", LN_BEST | {"REG_ROW": 1}),
        ("+ REG_ROW + EVICT_HINT", LN_BEST | {"REG_ROW": 1, "EVICT_HINT": 1}),
        ("+ REG_ROW + EVICT_HINT, 512 threads", LN_BEST | {"REG_ROW": 1, "EVICT_HINT": 1, "BLOCK": 512, "REG_VECS": 4}),
    ],
    "gemv": [
        ("earlier best (REG_BLOCK 2 rows, VEC4 UNROLL)", GEMV_BEST),
        ("+ EVICT_HINT (A evict_first, x evict_last)", GEMV_BEST | {"EVICT_HINT": 1}),
        ("+ EVICT_HINT + READONLY (ld.global.nc)", GEMV_BEST | {"EVICT_HINT": 1, "READONLY": 1}),
        ("+ EVICT_HINT, one row a block (Triton's)", GEMV_BEST | {"EVICT_HINT": 1, "REG_BLOCK": 0}),
        ("+ EVICT_HINT, 4 rows a block", GEMV_BEST | {"EVICT_HINT": 1, "RW": 4}),
        ("+ EVICT_HINT, 512 threads", GEMV_BEST | {"EVICT_HINT": 1, "BLOCK": 512, "LAUNCH_BOUNDS": 0}),
    ],
}


# Occupancy: Inductor's kernels for these ops on an H200 run 512 threads at 23-44 registers (3-4
# blocks an SM, docs/benchmarks/2026-11-29-occupancy-six-workers.md); the search's bests hold the
# row in registers (REG_ROW) at 256 threads and 71-116 registers (2-3 blocks). The template's plain
# two passes at 512 threads need 40 registers (48 for layernorm), a shape the searches rarely met.
PLAIN = {"VEC4": 1, "EVICT_HINT": 1, "WARP_SHUFFLE": 1, "FAST_MATH": 1}
HELD = {"BLOCK": 256, "CHUNK": 1, "FAST_MATH": 1, "READONLY": 1, "REG_ROW": 1, "REG_VECS": 8, "UNROLL": 1, "VEC4": 1,
        "WARP_SHUFFLE": 1}


def _plain(extra: dict[str, int], held: dict[str, int], most: int) -> list[tuple[str, dict[str, int]]]:
    two = PLAIN | extra
    wide = [("two passes, 1024 threads", two | {"BLOCK": 1024})] if most >= 1024 else []
    return [
        ("the search's best shape (REG_ROW)", held),
        ("two passes, 256 threads", two | {"BLOCK": 256}),
        ("two passes, 512 threads (Inductor's)", two | {"BLOCK": 512}),
        ("two passes, 512 threads, UNROLL 2", two | {"BLOCK": 512, "UNROLL": 1, "UNROLL_BY": 2}),
        ("two passes, 512 threads, READONLY", two | {"BLOCK": 512, "READONLY": 1}),
        ("two passes, 512 threads, no hints", {k: v for k, v in two.items() if k != "EVICT_HINT"} | {"BLOCK": 512}),
    ] + wide


OCCUPANCY: dict[str, list[tuple[str, dict[str, int]]]] = {
    "rmsnorm": _plain({}, HELD, 1024),
    "rmsnorm_bf16": _plain({"WIDE": 1}, {"BLOCK": 128, "FAST_MATH": 1, "REG_ROW": 1, "REG_VECS": 8, "VEC4": 1,
                                         "WARP_SHUFFLE": 1, "WIDE": 1}, 1024),
    "layernorm": _plain({"ONLINE": 1}, HELD | {"ONLINE": 1}, 512),  # its BLOCK stops at 512
}


def _in_flight(extra: dict[str, int], blocks: tuple[int, ...]) -> list[tuple[str, dict[str, int]]]:
    """Loads in flight a thread: the plain two passes unrolled 4 and 8, packs of 8 (WIDE) unrolled,
    a chunk loaded before use; at each block size."""
    two, rows = PLAIN | extra, []
    for b in blocks:
        rows += [(f"{b} threads, UNROLL 4", two | {"BLOCK": b, "UNROLL": 1, "UNROLL_BY": 4}),
                 (f"{b} threads, UNROLL 8", two | {"BLOCK": b, "UNROLL": 1, "UNROLL_BY": 8}),
                 (f"{b} threads, CHUNK 4", two | {"BLOCK": b, "CHUNK": 1, "UNROLL_BY": 4})]
        if "ONLINE" not in extra:
            rows += [(f"{b} threads, WIDE, UNROLL 2", two | {"BLOCK": b, "WIDE": 1, "UNROLL": 1, "UNROLL_BY": 2}),
                     (f"{b} threads, WIDE, UNROLL 4", two | {"BLOCK": b, "WIDE": 1, "UNROLL": 1, "UNROLL_BY": 4})]
    return rows


IN_FLIGHT: dict[str, list[tuple[str, dict[str, int]]]] = {
    "rmsnorm": _in_flight({}, (512, 256)),
    "rmsnorm_bf16": _in_flight({"WIDE": 1}, (512, 256)),
    "layernorm": _in_flight({"ONLINE": 1}, (512, 256)),
}


def _stores(extra: dict[str, int], chunk_512: int) -> list[tuple[str, dict[str, int]]]:
    """y stored plainly (EVICT_HINT, as Inductor's kernels) or evict_first (STORE_HINT) at the
    shapes that came closest, and Inductor's own: 512 threads, the row's packs loaded at once."""
    two, rows = PLAIN | extra, []
    for label, combo in (("256 threads, CHUNK 4", two | {"BLOCK": 256, "CHUNK": 1, "UNROLL_BY": 4}),
                         ("256 threads, UNROLL 4", two | {"BLOCK": 256, "UNROLL": 1, "UNROLL_BY": 4}),
                         (f"512 threads, CHUNK {chunk_512} (Inductor's)", two | {"BLOCK": 512, "CHUNK": 1,
                                                                               "UNROLL_BY": chunk_512}),
                         ("REG_ROW, 256 threads", two | {"BLOCK": 256, "REG_ROW": 1, "REG_VECS": 8})):
        rows += [(f"{label}, y plain", combo), (f"{label}, y evict_first", combo | {"STORE_HINT": 1})]
    return rows


STORES: dict[str, list[tuple[str, dict[str, int]]]] = {
    "rmsnorm": _stores({}, 4),
    "rmsnorm_bf16": _stores({"WIDE": 1}, 2),
    "layernorm": _stores({"ONLINE": 1}, 4),
}

# Inductor's winning configurations on an H200 (their .best_config files): XBLOCK 1, R0_BLOCK 8192
# (the whole row in one step) or 4096, 16 warps, at 32 registers (rmsnorm_bf16, 4 blocks an SM),
# 40 (rmsnorm, 3) and 44 (layernorm). The templates' nearest shape, 512 threads loading the row's
# packs at once (CHUNK), takes 54-56 registers: 2 blocks an SM. MIN_BLOCKS_KEY asks for more
# through the kernel's launch bounds (the template is rewritten for the probe, not changed).
MIN_BLOCKS_KEY = "__min_blocks__"


def _inductor(extra: dict[str, int], chunk: int) -> list[tuple[str, dict[str, int]]]:
    one = PLAIN | extra | {"BLOCK": 512, "CHUNK": 1, "UNROLL_BY": chunk}
    return [("512 threads, the row's packs at once", one),
            ("the same, 3 blocks an SM", one | {MIN_BLOCKS_KEY: 3}),
            ("the same, 4 blocks an SM", one | {MIN_BLOCKS_KEY: 4}),
            ("256 threads, CHUNK 4", PLAIN | extra | {"BLOCK": 256, "CHUNK": 1, "UNROLL_BY": 4}),
            ("256 threads, CHUNK 4, 6 blocks an SM", PLAIN | extra | {"BLOCK": 256, "CHUNK": 1, "UNROLL_BY": 4,
                                                                     MIN_BLOCKS_KEY: 6})]


INDUCTOR: dict[str, list[tuple[str, dict[str, int]]]] = {
    "rmsnorm": _inductor({}, 4),
    "rmsnorm_bf16": _inductor({"WIDE": 1}, 2),
    "layernorm": _inductor({"ONLINE": 1}, 4),
}


def _lean(extra: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """The LEAN kernel (a block a row, no general paths: 32 registers at 2048 threads an SM) at
    Inductor's shape and around it, against the searches' held row."""
    lean = {"LEAN": 1, "VEC4": 1, "EVICT_HINT": 1, "READONLY": 1, "WARP_SHUFFLE": 1, "FAST_MATH": 1} | extra
    at = {"BLOCK": 512, "LEAN_THREADS": 2048, "UNROLL_BY": 4}  # explicit: 1536 is the default
    return [("the searches' held row (REG_ROW, general kernel)", HELD | extra),
            ("LEAN, 512 threads, 2048 an SM, 4 packs", lean | at),
            ("LEAN, 512 threads, 1536 an SM, 4 packs", lean | at | {"LEAN_THREADS": 1536}),
            ("LEAN, 512 threads, 1024 an SM, 4 packs", lean | at | {"LEAN_THREADS": 1024}),
            ("LEAN, 512 threads, 2048 an SM, 2 packs", lean | at | {"UNROLL_BY": 2}),
            ("LEAN, 512 threads, 2048 an SM, y evict_first", lean | at | {"STORE_HINT": 1}),
            ("LEAN, 512 threads, 2048 an SM, no hints", {k: v for k, v in lean.items() if k != "EVICT_HINT"} | at),
            ("LEAN, 256 threads, 2048 an SM", lean | at | {"BLOCK": 256}),
            ("LEAN, 1024 threads, 2048 an SM, 2 packs", lean | at | {"BLOCK": 1024, "UNROLL_BY": 2})]


LEAN = {"rmsnorm": _lean({}), "rmsnorm_bf16": _lean({"WIDE": 1}), "layernorm": _lean({"ONLINE": 1})}


def _held(extra: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """LEAN with REG_ROW: a row of one step (UNROLL_BY packs a thread) read once into registers,
    as Inductor's persistent reductions do, against LEAN's two passes at its best shapes."""
    lean = {"LEAN": 1, "VEC4": 1, "EVICT_HINT": 1, "READONLY": 1, "WARP_SHUFFLE": 1, "FAST_MATH": 1} | extra
    at = {"BLOCK": 512, "LEAN_THREADS": 1536, "UNROLL_BY": 4}
    held = lean | at | {"REG_ROW": 1}
    rows = [("LEAN, two passes, 512 threads, 1536 an SM", lean | at),
            ("LEAN, two passes, 256 threads, 2048 an SM", lean | at | {"BLOCK": 256, "LEAN_THREADS": 2048}),
            ("LEAN held, 512 threads, 1536 an SM", held),
            ("LEAN held, 512 threads, 1536 an SM, y evict_first", held | {"STORE_HINT": 1}),
            ("LEAN held, 512 threads, 1536 an SM, no hints", {k: v for k, v in held.items() if k != "EVICT_HINT"}),
            ("LEAN held, 1024 threads, 2048 an SM, 2 packs", held | {"BLOCK": 1024, "LEAN_THREADS": 2048, "UNROLL_BY": 2}),
            ("LEAN held, 1024 threads, 1024 an SM", held | {"BLOCK": 1024, "LEAN_THREADS": 1024})]
    if extra.get("ONLINE"):
        rows.append(("LEAN held, 512 threads, 1536 an SM, two exact passes", held | {"ONLINE": 0}))
    return rows


HELD_LEAN = {"rmsnorm": _held({}), "rmsnorm_bf16": _held({"WIDE": 1}), "layernorm": _held({"ONLINE": 1})}
PLAN_SETS = {"switches": PLANS, "occupancy": OCCUPANCY, "in_flight": IN_FLIGHT, "stores": STORES,
             "inductor": INDUCTOR, "lean": LEAN, "held": HELD_LEAN}
BOUNDS = "#define KERNEL_BOUNDS __launch_bounds__(BLOCK, 1)"


def combination(task: tasks.Task, values: dict[str, int]) -> candidate.Candidate:
    """The task's template at `values`; MIN_BLOCKS_KEY rewrites its launch bounds' blocks an SM."""
    values = dict(values)
    blocks = values.pop(MIN_BLOCKS_KEY, None)
    source = task.template_source or ""
    if blocks is not None:
        if BOUNDS not in source:
            raise SystemExit(f"membound_probe: {task.name}'s template has no line {BOUNDS!r} to rewrite")
        source = source.replace(BOUNDS, f"#define KERNEL_BOUNDS __launch_bounds__(BLOCK, {blocks})")
    return candidate.with_defines(candidate.parse(source, task), values)


def line(name: str, results: list[Evaluation]) -> str:
    """One row: the verdict, and where every round was OK the median of their medians, the
    spread, and the ratios to torch.compile, eager and the copy ceiling."""
    bad = next((r for r in results if r.verdict != Verdict.OK or r.timing is None), None)
    if bad is not None:
        failed = next((c for c in bad.checks if not c.passed), None)
        where = f" at {dict(failed.size)}: {failed.detail[:160]}" if failed else ""
        return f"{name:52s} {bad.verdict.value}{where} {bad.message[:200]}"
    medians = [r.timing.median_us for r in results if r.timing]
    us = statistics.median(medians)
    last = results[-1]

    def ratio(of: float | None, label: str) -> str:
        return f"{of / us:5.3f}x {label} ({of:.1f} us)" if of else f"  -   {label}"

    ceiling = statistics.median(r.timing.ceiling_fraction for r in results if r.timing)
    return (f"{name:52s} OK  {us:7.1f} us ({min(medians):.1f}-{max(medians):.1f})  "
            f"{ratio(last.torch_compile_us, 'torch.compile')}  {ratio(last.torch_us, 'eager')}  "
            f"{100 * ceiling:5.1f}% of copy  regs {last.resources.registers}")


def probe(evaluator: GpuEvaluator, task_name: str, plan: list[tuple[str, dict[str, int]]], rounds: int) -> None:
    """Each combination of the task's template judged and timed `rounds` times, interleaved."""
    task = tasks.load(task_name)
    print(f"{task_name} at {dict(task.bench_size)} on {evaluator.device().name}", flush=True)
    results: list[list[Evaluation]] = [[] for _ in plan]
    for _ in range(rounds):
        for i, (_, values) in enumerate(plan):
            if results[i] and results[i][-1].verdict != Verdict.OK:
                continue  # not OK once: its line says why, no more GPU time for it
            results[i].append(evaluator.evaluate(combination(task, values), tune=False))
    for (name, _), rs in zip(plan, results, strict=True):
        print(line(name, rs), flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="*", help=f"tasks to probe (default: {' '.join(PLANS)})")
    parser.add_argument("--rounds", type=int, default=3, help="evaluations of each combination (default 3)")
    parser.add_argument("--plans", choices=sorted(PLAN_SETS), default="switches",
                        help="switches: the newer switches against the earlier best (default); occupancy: "
                             "the plain two passes at Inductor's 512 threads against the held row; in_flight: "
                             "loads in flight a thread; stores: y stored plainly or evict_first; inductor: "
                             "Inductor's shape at 2 to 4 blocks an SM; lean: the norms' LEAN kernels; held: LEAN "
                             "with a row of one step held in registers (REG_ROW)")
    args = parser.parse_args(argv)
    plans = PLAN_SETS[args.plans]
    unknown = [n for n in args.tasks if n not in plans]
    if unknown or args.rounds < 1:
        print(f"membound_probe: {'unknown task ' + ', '.join(unknown) if unknown else '--rounds must be 1 or more'}"
              f" (tasks: {', '.join(plans)})", file=sys.stderr)
        return 2
    names = args.tasks or list(plans)
    config = Config(eval=EvalConfig(), tune=TuneConfig(trials=0))  # torch.compile on: its ratio is the point
    evaluator = GpuEvaluator(WorkerSpec.of(config, [tasks.load(n) for n in names]))
    try:
        started = time.perf_counter()
        for name in names:
            probe(evaluator, name, plans[name], args.rounds)
        print(f"({time.perf_counter() - started:.0f} s)")
    finally:
        evaluator.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
