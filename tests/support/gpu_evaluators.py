"""What the GPU tests' evaluators share: the spec of a campaign's tasks, tasks held to their test
sizes, and candidates compiled ahead. An evaluator costs a GPU child (a CUDA context, the device's
ceilings, PyTorch imported) and each task's preparation (benchmark inputs and float64 references,
seconds each at the benchmark size), so the GPU tests build one per module or session where the
tests allow, and compile a module's candidates in parallel before its tests judge them one by one."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fsr import tasks
from fsr.config import Config
from fsr.types import Candidate, Task, WorkerSpec

if TYPE_CHECKING:
    from fsr.evaluate.evaluator import GpuEvaluator

COMPILE_THREADS = 16  # NVRTC releases the GIL; the evaluator's compile processes take them in turn
# The candidates each evaluator took through its static stage ahead (`precompile`), by id
_precompiled: weakref.WeakKeyDictionary[GpuEvaluator, set[str]] = weakref.WeakKeyDictionary()


def spec(config: Config, names: Iterable[str] | None = None, **fields: Any) -> WorkerSpec:
    """A spec of these tasks (default: every task), as a campaign's driver builds one (the child's
    host threads from `config.eval.host_threads`, as WorkerSpec.of takes them)."""
    loaded = [tasks.load(n) for n in (tasks.list_tasks() if names is None else names)]
    fields.setdefault("host_threads", config.eval.host_threads)
    return WorkerSpec(tuple(loaded), config.eval, config.tune, **fields)


def at_test_sizes(task: Task) -> Task:
    """The task with its largest test size (by input elements) as its benchmark size: a candidate
    is checked at every test size as before, and timed, its timed runs checked, at that size, so
    preparing the task builds references of test sizes only (no 8192^3 product on the host)."""
    largest = max(task.test_sizes, key=lambda size: tasks.input_elements(task, dict(size)))
    return replace(task, bench_size=largest)


def precompile(evaluator: GpuEvaluator, candidates: Iterable[Candidate]) -> None:
    """Take candidates through the evaluator's static stage (header, guards, compile, the compiled
    program's guards) in parallel, as `evaluate` would one at a time: their programs wait in its
    compile cache, and a candidate the stage refuses is refused again, identically, when judged.
    A candidate this evaluator took through it before is not taken again: the session's evaluator
    serves modules whose tests run task by task between other modules' (xdist_gpus.BY_TASK), so
    their module fixtures build again at each return."""
    from fsr.evaluate.static import static_stage

    arch = evaluator.device().arch
    try:
        done = _precompiled.setdefault(evaluator, set())
    except TypeError:  # a stand-in no weak reference can name: nothing kept
        done = set()
    todo = [(c, evaluator.spec.task(c.task)) for c in {c.id: c for c in candidates if c.id not in done}.values()]
    missing = sorted({c.task for c, task in todo if task is None})
    assert not missing, f"tasks not in the evaluator's spec: {missing}"
    with ThreadPoolExecutor(COMPILE_THREADS) as pool:
        list(pool.map(lambda pair: static_stage(pair[0], pair[1], arch, evaluator.compiler), todo))
    done.update(c.id for c, _ in todo)
