"""KernelBench levels imported and checked: `fsr import` each level folder (counts per level), then
for every imported task, at every test size, PyTorch's own float32 forward (the task's
`torch_module`, on the GPU when CuPy sees one, else on the CPU) against the task's float64
`reference`, within the task's tolerance. A task whose float32 PyTorch fails its own tolerance
at some size would fail honest kernels: each is listed with the size and the worst error.

    python bench/kernelbench_check.py KERNELBENCH/level1 KERNELBENCH/level2 KERNELBENCH/level3 [--out DIR] [--jobs N] [--timeout S]

Prints one line per level (imported, skipped, checked, agreeing at every size) and one per task
that disagrees or could not run; `--json FILE` writes every task's result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fsr import tasks
from fsr.kernelbench.runtime import outputs


def device_arrays() -> tuple[str, Any]:
    """("cuda", cupy.asarray) where CuPy sees a GPU, else ("cpu", the identity)."""
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() > 0:
            return "cuda", cp.asarray
    except Exception:  # no CUDA here: check on the CPU
        pass
    return "cpu", lambda a: a


def check_task(task: tasks.Task, to_device: Any) -> dict[str, Any]:
    """Every test size: float32 PyTorch against the float64 reference; the first failing size."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    functions = tasks.functions(task)
    worst = 0.0
    for size in task.test_sizes:
        sizes = dict(size)
        inputs = functions.make_inputs(sizes, np.random.default_rng(0))
        expected = functions.reference({k: np.array(v, copy=True) for k, v in inputs.items()}, sizes)
        model, args = functions.torch_module({k: to_device(v) for k, v in inputs.items()}, sizes)
        with torch.no_grad():
            got = outputs(model(*args))
        for out, want in zip(got, expected.values(), strict=True):
            g = out.detach().cpu().double().numpy().reshape(np.shape(want))
            err = np.abs(g - want) - (task.atol + task.rtol * np.abs(want))
            worst = max(worst, float(np.max(np.abs(g - want), initial=0.0)))
            if not np.all(err <= 0):
                return {"ok": False, "size": sizes, "max_abs_err": worst}
    return {"ok": True, "max_abs_err": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("levels", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="where the tasks go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write every task's result here")
    parser.add_argument("--jobs", type=int, default=1, help="files `fsr import` imports at once (default 1)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds `fsr import` gives one file (default 300)")
    args = parser.parse_args()
    device, to_device = device_arrays()
    out = args.out or Path(tempfile.mkdtemp(prefix="fsr-kb-"))
    results: dict[str, Any] = {}
    for level in args.levels:
        started = time.monotonic()
        dest = out / level.name
        done = subprocess.run([sys.executable, "-m", "fsr", "import", str(level), "--out", str(dest),
                               "--jobs", str(args.jobs), "--timeout", str(args.timeout)],
                              capture_output=True, text=True)
        skipped = [line for line in done.stdout.splitlines() if line.startswith("skipped ")]
        names = sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []
        agree = 0
        for name in names:
            try:
                result = check_task(tasks.load(str(dest / name)), to_device)
            except Exception as e:  # a comparator that cannot run on this device: listed, not fatal
                result = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
            results[name] = result
            agree += bool(result["ok"])
            if not result["ok"]:
                why = result.get("error") or f"disagrees at {result['size']} (max abs err {result['max_abs_err']:.3g})"
                print(f"  {name}: {why}")
        print(f"{level.name}: imported {len(names)}, skipped {len(skipped)}, float32 PyTorch within tolerance at "
              f"every test size {agree} of {len(names)} (on {device}, {time.monotonic() - started:.0f} s)")
        for line in skipped:
            print(f"  {line}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
