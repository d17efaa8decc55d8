"""How close sgemm kernels come to the task's tolerance: the worst |C - ref| / (atol + rtol * |ref|)
(1 fails the check) of feature-template configurations and of cuBLAS (`cupy.matmul`), each on the
same inputs (the task's generator, several seeds) at every test size and the bench size, against
the float64 reference.

    python bench/sgemm_error.py CONFIGS.json [--seeds N] [--name LABEL=INDEX ...]

CONFIGS.json: {"sgemm": [{DEFINE: value, ...}, ...]}, as for bench/explore.py. Prints a Markdown
table, one row per kernel, one column per size (the worst over the seeds).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cupy as cp
import numpy as np
from explore import fixed  # bench/explore.py, beside this script

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate import bench
from fsr.evaluate.compile import compile_candidate
from fsr.evaluate.verify import Program, enqueue, make_buffers, plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs")
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    task = tasks.load("sgemm")
    fn = tasks.functions(task)
    template = cfmt.parse(task.template_source, task)
    arch = bench.device_info().arch
    configs = json.loads(Path(a.configs).read_text())["sgemm"]
    programs = []
    for values in configs:
        cand = fixed(template, values)
        compiled = compile_candidate(cand, arch)
        programs.append((cand, Program(compiled.cubin, compiled.lowered)))
    sizes = [dict(s) for s in task.test_sizes] + [dict(task.bench_size)]
    worst = np.zeros((len(configs) + 1, len(sizes)))
    stream = cp.cuda.Stream(non_blocking=True)
    for seed in range(a.seeds):
        for si, size in enumerate(sizes):
            inputs = fn.make_inputs(size, np.random.default_rng(seed))
            ref = cp.asarray(inputs["A"], cp.float64) @ cp.asarray(inputs["B"], cp.float64)
            bound = task.atol + task.rtol * cp.abs(ref)
            lib = cp.matmul(cp.asarray(inputs["A"]), cp.asarray(inputs["B"]))
            worst[-1, si] = max(worst[-1, si], float(cp.max(cp.abs(lib - ref) / bound)))
            for ci, (cand, program) in enumerate(programs):
                with stream:
                    buf = make_buffers(task, cand, size, inputs)
                    buf.reset(cand)
                    enqueue(plan(program, cand, task, size, {k: g.array for k, g in buf.all().items()}), stream)
                    stream.synchronize()
                    got = buf.outputs["C"].array.astype(cp.float64)
                    worst[ci, si] = max(worst[ci, si], float(cp.max(cp.abs(got - ref) / bound)))
    names = [" ".join(f"{k}={v}" for k, v in c.items() if v and k not in ("SMEM_TILE", "REG_BLOCK", "VEC4"))
             for c in configs] + ["cuBLAS (cupy.matmul)"]
    print(f"worst error / tolerance over {a.seeds} seeds on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print("| kernel | " + " | ".join("x".join(str(v) for v in s.values()) for s in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for name, row in zip(names, worst, strict=True):
        print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in row) + " |")


if __name__ == "__main__":
    main()
