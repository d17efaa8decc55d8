"""The importing process: reads problem file paths on stdin, one a line, imports each and prints
one JSON line for it. `fsr import` runs it as a child so that a file that hangs or exhausts memory
costs that file only (the child is killed and a fresh one takes the next file), and torch is
imported once per child rather than once per file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fsr.kernelbench import DEFAULT_MAX_BENCH_BYTES


def import_one(path: Path, out: Path, max_bench_bytes: int = DEFAULT_MAX_BENCH_BYTES,
               dtype: str = "float32") -> dict[str, object]:
    """{"name", "ok", "reason"} or {"name", "ok", "tests", "atol", "note", "scaled"} for one file
    (and "tolerance", the dtype's default, where `dtype` is not float32)."""
    from fsr import tasks
    from fsr.kernelbench import write
    from fsr.kernelbench.plan import plan
    from fsr.kernelbench.probe import ProblemError

    name = write.task_name(path)
    try:
        p = plan(path, max_bench_bytes, dtype)
        folder = write.write(path, p, out)
    except ProblemError as e:
        return {"name": name, "ok": False, "reason": str(e)}
    except Exception as e:  # the file is user code: whatever it raises is a reason, not a crash
        return {"name": name, "ok": False, "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
    try:
        tasks.load(folder)
    except tasks.TaskError as e:
        return {"name": name, "ok": False, "reason": f"the written task does not load: {e}"}
    done: dict[str, object] = {"name": name, "ok": True, "tests": len(p.test_sizes), "atol": p.atol, "note": p.note,
                               "scaled": p.scaled}
    return done | ({"tolerance": f"{p.dtype}, {p.tolerance}"} if p.tolerance else {})


def main() -> None:
    import torch

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    max_bench_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MAX_BENCH_BYTES
    dtype = sys.argv[3] if len(sys.argv) > 3 else "float32"
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(import_one(Path(line.rstrip("\n")), out, max_bench_bytes, dtype)), flush=True)


if __name__ == "__main__":
    main()
