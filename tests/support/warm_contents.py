"""The GPU test session's heavy screening sets, built at its start on most of the host's cores.

Under pytest-xdist a test's GPU child builds a task's benchmark sets (float64 references of 8192^3
products, 4096-token attention) on its worker's share of the cores (xdist_gpus.host_threads: 2 of
16 with six workers), while the other workers' children that need the same sets wait on its lock:
a minute or more for each heavy task. Here one background process, started by the first worker
when the session holds GPU tests that use the session's contents cache (tests/conftest.py
`contents_dir`), builds the heavy tasks' sets (`heavy`: at least HEAVY_FLOPS at the benchmark
size) at once, every set on a thread of its own, through fsr's own code, keys and locks
(fsr.evaluate.gpu.inputs.screening_contents), so a test that needs one finds it built or waits on
a builder that has every set underway. Its sets are then dated PIN_S ahead: the cache prunes the
oldest files first past `eval.contents_cache_max_bytes` (16 GiB, where every task's sets take
about 49 GiB), so the light sets, cheap to build again, go first and the heavy ones stay for the
session (its folder is temporary). It never fails a test: what it did or why it could not, with
each task's seconds, goes to its log (LOG_NAME beside the sets, or LOG_ENV's path).

    python -m tests.support.warm_contents FOLDER [TASK ...]   # what the session's first worker runs
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fsr import tasks
from fsr.config import EvalConfig
from fsr.evaluate import host
from fsr.evaluate.sandbox import THREAD_VARIABLES
from fsr.types import Task
from tests.support.paths import ROOT

HEAVY_FLOPS = 1e11  # at the benchmark size: a float64 reference of this many takes seconds a thread
WARM_SHARE = 0.75  # of the host's cores: the workers' own start (compiles, CUDA, imports) keeps the rest
PIN_S = 3 * 3600.0  # the heavy sets' files are dated this far ahead: past any session
LOG_NAME = "warm-up.log"
LOG_ENV = "FSR_TEST_WARM_LOG"  # where the log goes instead (bench/gpu_check.py: beside the tests' log)
# bench/gpu_check.py --warm-early: the session's contents cache is this folder, shared by its steps,
# and its warm-up was started before them (the first worker starts none)
FOLDER_ENV = "FSR_TEST_CONTENTS_DIR"
STARTED_ENV = "FSR_TEST_WARMED"
USES_CACHE = "contents_dir"  # the fixture of the session's contents cache (tests/conftest.py)
_log = logging.getLogger("warm_contents")
_started: list[subprocess.Popen[bytes]] = []  # held, so it is never collected while it runs


def heavy(candidates: Iterable[Task], min_flops: float = HEAVY_FLOPS) -> list[Task]:
    """The tasks whose work at the benchmark size is at least `min_flops` (their float64 references
    cost about as much), the most first."""
    found = [(tasks.flops(task, dict(task.bench_size)), task) for task in candidates]
    return [task for flops, task in sorted(found, key=lambda x: -x[0]) if flops >= min_flops]


def session_folder(base: Path, environ: Mapping[str, str]) -> Path:
    """The session's contents cache (made if missing): FOLDER_ENV's where bench/gpu_check.py
    --warm-early gives one, else "fsr-contents" beside the pytest-xdist workers' temporary folders
    (`base`'s parent; `base` itself without xdist)."""
    given = environ.get(FOLDER_ENV)
    folder = Path(given) if given else (base.parent if environ.get("PYTEST_XDIST_WORKER") else base) / "fsr-contents"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wanted(items: Sequence, worker: str | None, workers: int, devices: int) -> bool:  # type: ignore[type-arg]
    """Whether this process starts the warm-up: the first pytest-xdist worker of several (every
    worker collects the same items), on a host with a GPU, where a GPU test that is not skipped
    uses the session's contents cache. Without xdist a GPU child builds on every core anyway."""
    if worker != "gw0" or workers < 2 or devices < 1:
        return False
    return any(item.get_closest_marker("gpu") and not item.get_closest_marker("skip")
               and USES_CACHE in getattr(item, "fixturenames", ()) for item in items)


def blas_threads(sets: int, cores: int | None = None) -> int:
    """BLAS threads for each of `sets` sets built at once on WARM_SHARE of the cores."""
    share = max(1, int((cores or host.cores()) * WARM_SHARE))
    return max(1, share // max(1, sets))


def start(folder: Path, names: Sequence[str] | None = None, nice: int = 0) -> subprocess.Popen[bytes] | None:
    """The warm-up of the contents cache `folder`, started in the background (None, logged, where
    it cannot start): the heavy tasks among `names` (default every task), at `nice` more niceness
    (bench/gpu_check.py --warm-early: beside the whole_machine tests, whose processes go first)."""
    chosen = heavy(tasks.load(n) for n in (names if names is not None else tasks.list_tasks()))
    log = Path(os.environ.get(LOG_ENV) or folder / LOG_NAME)
    if not chosen:
        return None
    sets = len(chosen) * max(EvalConfig().input_sets, 2)
    env = os.environ | dict.fromkeys(THREAD_VARIABLES, str(blas_threads(sets)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "tests.support.warm_contents", str(folder), *(t.name for t in chosen)]
    try:
        with log.open("w") as sink:
            _started.append(subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                             stderr=subprocess.STDOUT,
                                             preexec_fn=(lambda: os.nice(nice)) if nice else None))
        return _started[-1]
    except OSError as e:
        _log.warning("the contents cache's warm-up did not start (%s): the tests build their sets", e)
        return None


def warm(folder: Path, chosen: Sequence[Task], config: EvalConfig | None = None) -> dict[str, str]:
    """Each task's screening sets in the contents cache `folder`, built where missing (all tasks at
    once, each set on a thread), as a GPU child of `config` (default: the tests' evaluators', fsr's
    defaults) would key and build them; then dated PIN_S ahead. Each task's outcome: its seconds,
    or the error that stopped it (never raised)."""
    from fsr.evaluate.gpu import contents_cache
    from fsr.evaluate.gpu.inputs import screening_contents, screening_key, screening_seeds

    cfg = config or EvalConfig()
    cache = contents_cache.open_cache(str(folder), cfg.contents_cache_max_bytes)
    if cache is None:
        return dict.fromkeys((t.name for t in chosen), f"no contents cache at {folder}")

    def one(task: Task) -> str:
        started = time.perf_counter()
        try:
            screening_contents(task, cfg.seed, cfg.input_sets, cache)
        except Exception as e:  # a task's fault or the host's: the tests build it themselves
            return f"failed: {type(e).__name__}: {e}"
        ahead = time.time() + PIN_S
        for seed in screening_seeds(task, cfg.seed, cfg.input_sets):
            with contextlib.suppress(OSError):  # not stored (a full disk): nothing to keep
                os.utime(contents_cache.file_of(cache, screening_key(task, seed)), (ahead, ahead))
        return f"{time.perf_counter() - started:.1f} s"

    with ThreadPoolExecutor(max(1, len(chosen)), thread_name_prefix="warm") as pool:
        return dict(zip((t.name for t in chosen), pool.map(one, chosen), strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the session's contents cache")
    parser.add_argument("tasks", nargs="*", help="the tasks to build (default: the heavy ones)")
    args = parser.parse_args(argv)
    try:
        chosen = [tasks.load(n) for n in args.tasks] if args.tasks else heavy(tasks.load(n) for n in tasks.list_tasks())
    except tasks.TaskError as e:
        print(f"warm-up: {e}", flush=True)
        return 0
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "?")
    print(f"warm-up: {', '.join(t.name for t in chosen)} in {args.folder}, {threads} BLAS threads a set", flush=True)
    started = time.perf_counter()
    for name, outcome in warm(args.folder, chosen).items():
        print(f"warm-up: {name}: {outcome}", flush=True)
    print(f"warm-up: done in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
