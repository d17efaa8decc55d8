"""The importing process: reads one JSON request a line on stdin ({"path": a problem file,
"staging": an empty folder}), imports the file into the staging folder and prints one JSON line
for it. `fsr import` runs it as a child so that a file that hangs or exhausts memory costs that
file only (the child is killed and a fresh one takes the next file), and torch is imported once
per child rather than once per file. The child never writes the tasks folder itself: `fsr import`
moves a staged task there once it has the child's answer in time (`write.place`), so a file
reported skipped leaves nothing behind."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from fsr.kernelbench import DEFAULT_MAX_BENCH_BYTES


def stage_one(path: Path, staging: Path, out: Path, max_bench_bytes: int = DEFAULT_MAX_BENCH_BYTES,
              dtype: str = "float32") -> dict[str, object]:
    """{"name", "ok", "reason"} or {"name", "ok", "staged", "tests", "atol", "note", "scaled", "stress"} for
    one file (and "tolerance", the dtype's default, where `dtype` is not float32): its task folder
    written and loaded under `staging`, to be placed in `out` (whose folder of that name, if any,
    must be an earlier import)."""
    from fsr import tasks
    from fsr.files import InputFileError
    from fsr.kernelbench import stress, write
    from fsr.kernelbench.plan import plan
    from fsr.kernelbench.probe import ProblemError

    name = write.task_name(path)
    try:
        write.check_replaceable(out / name)
        p = plan(path, max_bench_bytes, dtype)
        folder = write.write(path, p, staging)
    except InputFileError as e:
        return {"name": name, "ok": False, "reason": e.why}
    except ProblemError as e:
        return {"name": name, "ok": False, "reason": str(e)}
    except Exception as e:  # the file is user code: whatever it raises is a reason, not a crash
        return {"name": name, "ok": False, "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
    try:
        tasks.load(folder)
    except tasks.TaskError as e:
        return {"name": name, "ok": False, "reason": f"the written task does not load: {e}"}
    done: dict[str, object] = {"name": name, "ok": True, "staged": str(folder), "tests": len(p.test_sizes),
                               "atol": p.atol, "note": p.note, "scaled": p.scaled, "stress": stress.summary(p.stress)}
    return done | ({"tolerance": f"{p.dtype}, {p.tolerance}"} if p.tolerance else {})


def import_one(path: Path, out: Path, max_bench_bytes: int = DEFAULT_MAX_BENCH_BYTES,
               dtype: str = "float32") -> dict[str, object]:
    """`stage_one`, then the staged task moved to `out/<name>` (`out` created only then): the
    import of one file in this process, as `fsr import` makes it."""
    from fsr.kernelbench import write
    from fsr.kernelbench.probe import ProblemError

    with tempfile.TemporaryDirectory(prefix="fsr-import-") as staging:
        result = stage_one(path, Path(staging), out, max_bench_bytes, dtype)
        if result["ok"]:
            try:
                write.place(Path(str(result.pop("staged"))), out)
            except (ProblemError, OSError) as e:
                return {"name": result["name"], "ok": False, "reason": str(e)}
    return result


def main() -> None:
    import torch

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    max_bench_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MAX_BENCH_BYTES
    dtype = sys.argv[3] if len(sys.argv) > 3 else "float32"
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(stage_one(Path(request["path"]), Path(request["staging"]), out, max_bench_bytes, dtype)),
              flush=True)


if __name__ == "__main__":
    main()
