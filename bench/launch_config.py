"""Launch fixed configurations of a task's feature template on one input size, with nothing else
on the GPU: a target for Nsight Compute or compute-sanitizer. Each configuration is compiled as fsr
compiles it and launched twice, as fsr declares its launches (grid, block, dynamic shared memory,
zeroed scratch), on the task's own inputs; nothing is checked or timed.

    python bench/launch_config.py TASK CONFIGS.json [--size N]
    ncu --kernel-name KERNEL --launch-skip 1 --launch-count 1 --set full python bench/launch_config.py ...
    compute-sanitizer --tool memcheck python bench/launch_config.py TASK CONFIGS.json --size 6

CONFIGS.json: a list of {DEFINE: value, ...} (switches and tunables; the rest keep their
defaults). `--size N`: the task's test size N (default: its bench size).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cupy as cp
import numpy as np

from fsr import tasks
from fsr.candidate import parse, with_defines
from fsr.evaluate import bench
from fsr.evaluate.compile import compile_candidate
from fsr.evaluate.verify import Program, enqueue, make_buffers, plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("configs", type=Path)
    ap.add_argument("--size", type=int, help="a test size's index (default: the bench size)")
    a = ap.parse_args()
    task = tasks.load(a.task)
    sizes = dict(task.bench_size if a.size is None else task.test_sizes[a.size])
    inputs = tasks.functions(task).make_inputs(sizes, np.random.default_rng(0))
    template = parse((Path(task.directory) / "template.cu").read_text(), task)
    arch = bench.device_info().arch
    stream = cp.cuda.Stream(non_blocking=True)
    for i, config in enumerate(json.loads(a.configs.read_text())):
        cand = with_defines(template, config)
        compiled = compile_candidate(cand, arch)
        program = Program(compiled.cubin, compiled.lowered)
        buffers = make_buffers(task, cand, sizes, inputs)
        with stream:
            launches = plan(program, cand, task, sizes, {k: g.array for k, g in buffers.all().items()})
            for _ in range(2):  # the first loads the module and warms the caches
                buffers.reset(cand)
                enqueue(launches, stream)
            stream.synchronize()
        print(i, config, program.resources(compiled.resources), flush=True)  # registers as loaded


if __name__ == "__main__":
    main()
