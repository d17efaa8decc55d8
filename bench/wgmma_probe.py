"""The bf16 templates' Hopper paths against their mma.sync defaults, at each task's benchmark
size on one GPU: each combination's verdict, median latency, TFLOP/s and its ratio to the task's
library comparator (cuBLAS for the GEMMs, cuDNN's SDPA for attention). No tuning; the evaluator
checks every test size first, so a combination that is not OK says where it failed. Where the
default WGMMA combination of a GEMM is not OK, the same code with B's descriptor strides swapped
is tried too, to tell a stride mix-up from other faults. Attention's list goes from the simplest
WGMMA kernel (no overlap, no ping-pong) through each FlashAttention-3 feature alone to all of
them, and one consumer group, so that where the most advanced one fails a simpler one still gives
a figure and the first failing line names the part at fault.

    python bench/wgmma_probe.py                 # gemm_bf16, then gemm_bf16_gelu (its defaults, and VEC4)
    python bench/wgmma_probe.py gemm_bf16_gelu  # one task, every combination below
    python bench/wgmma_probe.py attention_bf16 attention_bf16_causal
"""

from __future__ import annotations

import sys
import time

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Candidate, Evaluation, Verdict, WorkerSpec

COMBINATIONS = [
    ("mma.sync defaults", {}),
    ("WGMMA defaults (128 x 256, 2 consumers, 4 stages)", {"WGMMA": 1}),
    ("WGMMA 256 x 128 (WG_MT 2)", {"WGMMA": 1, "WG_BN": 128, "WG_MT": 2}),
    ("WGMMA 128 x 128, 6 stages", {"WGMMA": 1, "WG_BN": 128, "WG_STAGES": 6}),
    ("WGMMA 64 x 256, 1 consumer", {"WGMMA": 1, "WG_CONSUMERS": 1}),
    ("WGMMA defaults, bands of 16", {"WGMMA": 1, "WG_GROUP": 16}),
    ("WGMMA defaults, VEC4 (gemm_bf16_gelu: 16-byte stores)", {"WGMMA": 1, "VEC4": 1}),
]
ATTENTION = [
    ("mma.sync defaults", {}),
    ("WGMMA defaults (128 rows, 128 keys, 2 consumers, 3 stages)", {"WGMMA": 1}),
    ("WGMMA, 2 stages", {"WGMMA": 1, "WG_STAGES": 2}),
    ("WGMMA 1 consumer (no setmaxnreg)", {"WGMMA": 1, "WG_CONSUMERS": 1}),
    ("WGMMA + WG_OVERLAP (intra-warpgroup)", {"WGMMA": 1, "WG_OVERLAP": 1}),
    ("WGMMA + WG_PINGPONG (named barriers)", {"WGMMA": 1, "WG_PINGPONG": 1}),
    ("WGMMA + WG_OVERLAP + WG_PINGPONG (FA3)", {"WGMMA": 1, "WG_OVERLAP": 1, "WG_PINGPONG": 1}),
    ("FA3, 176 keys a tile", {"WGMMA": 1, "WG_OVERLAP": 1, "WG_PINGPONG": 1, "WG_BLOCK_N": 176}),
    ("FA3, 2 stages", {"WGMMA": 1, "WG_OVERLAP": 1, "WG_PINGPONG": 1, "WG_STAGES": 2}),
    ("FA3, 64 keys a tile, 3 stages", {"WGMMA": 1, "WG_OVERLAP": 1, "WG_PINGPONG": 1, "WG_BLOCK_N": 64,
                                        "WG_STAGES": 3}),
    ("WGMMA + WG_OVERLAP, 1 consumer, 176 keys", {"WGMMA": 1, "WG_OVERLAP": 1, "WG_CONSUMERS": 1, "WG_BLOCK_N": 176}),
]
# attention's V descriptor with its two strides swapped: tried where the WGMMA defaults are not OK
V_STRIDES = ("wg_desc(v + 2048 * kk, WG_BN * 128, 1024)", "wg_desc(v + 2048 * kk, 1024, WG_BN * 128)")
STRIDES = ("#define WG_B_LBO (64 * 128)\n#define WG_B_SBO 1024", "#define WG_B_LBO 1024\n#define WG_B_SBO (64 * 128)")


def line(name: str, result: Evaluation, library: str = "cuBLAS") -> str:
    """One row: the verdict (where not OK, the size and check that failed), and where OK the
    latency, rate and ratio to the library."""
    if result.verdict != Verdict.OK or result.timing is None:
        failed = next((c for c in result.checks if not c.passed), None)
        where = f" at {dict(failed.size)}: {failed.detail[:160]}" if failed else ""
        return f"{name:52s} {result.verdict.value}{where} {result.message[:200]}"
    t = result.timing
    ratio = f"{result.library_us / t.median_us:.2f}x {library} ({result.library_us:.0f} us)" if result.library_us else ""
    return (f"{name:52s} OK  median {t.median_us:8.1f} us  {t.tflops:6.0f} TFLOP/s  {ratio}  "
            f"regs {result.resources.registers}")


def probe(evaluator: GpuEvaluator, task_name: str, combinations: list[tuple[str, dict[str, int]]]) -> None:
    """Each combination of the task's template judged and timed, a line each."""
    task = tasks.load(task_name)
    template = candidate.parse(task.template_source or "", task)
    print(f"{task_name} at {dict(task.bench_size)} on {evaluator.device().name}", flush=True)
    for name, values in combinations:
        result = evaluator.evaluate(candidate.with_defines(template, values))
        print(line(name, result, task.library or "cuBLAS"), flush=True)
        if values == {"WGMMA": 1} and result.verdict != Verdict.OK:
            attention = task_name.startswith("attention")
            swap, what = (V_STRIDES, "V's") if attention else (STRIDES, "B's")
            swapped: Candidate = candidate.parse((task.template_source or "").replace(*swap), task)
            print(line(f"  the same, {what} LBO and SBO swapped", evaluator.evaluate(
                candidate.with_defines(swapped, values)), task.library or "cuBLAS"), flush=True)


def main(task_names: list[str]) -> None:
    plan = ([(n, ATTENTION if n.startswith("attention") else COMBINATIONS) for n in task_names]
            or [("gemm_bf16", COMBINATIONS[:-1]), ("gemm_bf16_gelu", COMBINATIONS[:2] + COMBINATIONS[-1:])])
    config = Config(eval=EvalConfig(torch_compile="off"), tune=TuneConfig(trials=0))
    evaluator = GpuEvaluator(WorkerSpec.of(config, [tasks.load(n) for n, _ in plan]))
    try:
        started = time.perf_counter()
        for name, combinations in plan:
            probe(evaluator, name, combinations)
        print(f"({time.perf_counter() - started:.0f} s)")
    finally:
        evaluator.close()


if __name__ == "__main__":
    main(sys.argv[1:])
