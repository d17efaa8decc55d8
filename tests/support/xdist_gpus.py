"""The GPU tests over every visible GPU: under pytest-xdist, `-n auto` starts a few workers per
visible GPU (the GPU tests spend most of their time on the host: compiles, references, children
starting, so one worker would leave its GPU idle), and each worker sees one GPU alone
(CUDA_VISIBLE_DEVICES set from its worker id before anything in it starts CUDA). A module's tests
stay together on a worker (its evaluator, a GPU child with its tasks' contents, is built once),
but a module of SPREAD is cut into runs of consecutive tests that go to several workers, handed
out first, so that no module's whole length is one worker's (SpreadScheduling); a TOGETHER
folder's modules are one unit; the tests of BY_TASK, judged on the session's evaluator of every
task at the benchmark size, are cut by task instead, a task's tests of every such module in one
run; FIRST's units, the longest without a GPU, are handed out first of all, the others by their
expected seconds (TEST_SECONDS). Pure functions of
the environment and the collected node ids but the scheduler: tests/conftest.py applies them."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from fsr.evaluate import host

T = TypeVar("T")

WORKER_ID = re.compile(r"^gw(\d+)$")  # pytest-xdist names its workers gw0, gw1, ...
SHARERS_ENV = "FSR_TEST_GPU_SHARERS"  # set in a worker: how many workers use its GPU


WORKERS_PER_GPU_ENV = "FSR_TEST_WORKERS_PER_GPU"  # overrides the per-GPU count `-n auto` takes
MAX_PER_GPU = 4  # beyond it, children share one GPU's memory ever more thinly for little gain
CORES_PER_WORKER = 4  # a worker's compiles and float64 references want a few cores each


def per_gpu(gpus: int, cores: int, environ: Mapping[str, str] = os.environ) -> int:
    """Workers each GPU gets under `-n auto`: WORKERS_PER_GPU_ENV where set, else as many as the
    host's cores feed (CORES_PER_WORKER each), at most MAX_PER_GPU, at least one."""
    try:
        asked = int(environ.get(WORKERS_PER_GPU_ENV, "0") or 0)
    except ValueError:
        asked = 0
    if asked > 0:
        return asked
    return max(1, min(MAX_PER_GPU, cores // (CORES_PER_WORKER * max(1, gpus))))


def auto_workers(gpus: int, cores: int | None = None, environ: Mapping[str, str] = os.environ) -> int:
    """How many workers `-n auto` starts: `per_gpu` for each visible GPU; on a machine without
    one, where only CPU tests run, one per core this process may use (pytest-xdist's own count
    would take physical cores where psutil is installed: one on a two-vCPU machine)."""
    if gpus <= 0:
        return cores or host.cores()
    return gpus * per_gpu(gpus, cores or host.cores(), environ)


# The GPU modules worth cutting: their tests take minutes in all (tests-gpu.xml of bench/gpu_check.py
# on two H200s, 2026-11-28: test_evaluator 228 s, the template modules 174 s and 143 s, test_certify
# 131 s, ...), how many runs at most. Each run builds the module's evaluator again, so only these.
SPREAD = {
    "tests/gpu/test_evaluator.py": 6,
    "tests/gpu/test_template_samples.py": 4,
    "tests/gpu/test_certify.py": 3,
    "tests/adversarial/test_side_channels_gpu.py": 3,
    "tests/gpu/test_comparator_figures.py": 2,
    "tests/gpu/test_stress.py": 2,
    "tests/gpu/test_preparation.py": 2,
}


# Folders whose modules are one unit, on one worker: tests/cluster's modules share one local Ray
# cluster (its package fixture), so it starts once a session, not once on each worker, and two
# clusters of a dozen processes never share a small machine's cores.
TOGETHER = ("tests/cluster/",)


# Tests judged on the session's evaluator of every task at the benchmark size (bench_evaluator,
# tests/gpu/conftest.py), by node id prefix (the longest that matches), each about one task: the
# task given here, or for None the first word of the test's parameters' id ("[gelu-VEC4-...]":
# tests parametrized by task first). A worker's evaluator prepares a task at that size (its
# benchmark sets read or built and uploaded, its comparators and its baseline timed: seconds)
# once and keeps the last few it used, so these tests go by task rather than by module: every
# test of a task, of every module here, in one run, one task after another (the baseline's
# first); BY_TASK_RUNS runs of whole tasks at most, the lightest tasks first: the heaviest sets
# (tests/support/warm_contents.py builds them at the session's start, a minute or more) are then
# built by the time a run reaches them, instead of kept waiting for at its start. (By module, each
# task was prepared again on every worker a module's run went to: a task's first template
# combination took about as long as its baseline, 3.8 s a test over test_template_combinations.py's
# 46, a task's second 0.8 s; every_task[attention_bf16], 28.7 s, waited for the warm-up.)
BY_TASK: dict[str, str | None] = {
    "tests/gpu/test_evaluator.py::test_every_task_baseline_is_ok[": None,
    "tests/gpu/test_evaluator.py::test_an_honest_wgmma_gemm_is_ok_on_an_sm_90_device": "gemm_bf16",
    "tests/gpu/test_template_combinations.py::test_template_combination_is_ok[": None,
    "tests/gpu/test_tasks_ai.py::test_strong_combination_is_correct_and_beats_the_baseline[": None,
    "tests/gpu/test_wgmma.py::": "gemm_bf16",
    "tests/gpu/test_wgmma.py::test_the_wgmma_template_is_ok_at_every_test_size[": None,
    "tests/gpu/test_wgmma.py::test_wgmma_tunables_are_ok[": None,
    "tests/gpu/test_wgmma_attention.py::": "attention_bf16",
    "tests/gpu/test_wgmma_attention.py::test_the_wgmma_template_is_ok_at_every_test_size[": None,
    "tests/gpu/test_wgmma_attention.py::test_wgmma_switches_and_tunables_are_ok[": None,
    "tests/gpu/test_wgmma_attention.py::test_the_causal_mask_dropped_is_wrong": "attention_bf16_causal",
    "tests/gpu/test_tma.py::": "gemm_bf16",
    "tests/gpu/test_tma.py::test_launches_in_clusters_run": "gelu",
    "tests/gpu/test_tma.py::test_a_grid_its_compiled_cluster_does_not_divide_is_refused_in_one_line": "gelu",
    "tests/gpu/test_module_variables.py::": "softmax",
}
BY_TASK_SCOPE = "tests judged by task"  # their units' name (with the run's: "#1of2")
BY_TASK_RUNS = 3


@functools.cache
def _task_rank() -> dict[str, int]:
    """Every task's place, the lightest first: by its work at the benchmark size (as
    warm_contents.heavy weighs it), then its name."""
    from fsr import tasks

    loaded = [tasks.load(name) for name in tasks.list_tasks()]
    weighed = sorted((tasks.flops(task, dict(task.bench_size)), task.name) for task in loaded)
    return {name: i for i, (_, name) in enumerate(weighed)}


def _by_task_prefix(nodeid: str) -> str | None:
    found = [prefix for prefix in BY_TASK if nodeid.startswith(prefix)]
    return max(found, key=len) if found else None


def by_task(nodeid: str) -> str | None:
    """The task a BY_TASK test is about (None: not one of them; "" where its id names none)."""
    prefix = _by_task_prefix(nodeid)
    if prefix is None:
        return None
    if BY_TASK[prefix] is not None:
        return BY_TASK[prefix]
    first = nodeid.split("[", 1)[1].split("-", 1)[0].removesuffix("]") if "[" in nodeid else ""
    return first if first in _task_rank() else ""


def task_runs(nodeids: list[str], workers: int) -> list[tuple[str, list[str]]]:
    """The BY_TASK tests among `nodeids` in runs of whole tasks (the tasks lightest first, dealt
    out in turn: as many runs as BY_TASK_RUNS, the tasks and half the workers allow), as (unit
    name, node ids in the order they run: task by task, the lightest first, within a task module
    by module in BY_TASK's order, then as given)."""
    about = {n: by_task(n) for n in nodeids}
    mine = [n for n in nodeids if about[n] is not None]
    rank = _task_rank()
    names = sorted({about[n] or "" for n in mine}, key=lambda name: (rank.get(name, -1), name))
    if not names:
        return []
    runs = max(1, min(BY_TASK_RUNS, len(names), workers // 2))
    run_of = {name: i % runs for i, name in enumerate(names)}
    modules = list(dict.fromkeys(prefix.split("::", 1)[0] for prefix in BY_TASK))
    place = {name: i for i, name in enumerate(names)}
    position = {n: i for i, n in enumerate(mine)}
    order = sorted(mine, key=lambda n: (place[about[n] or ""], modules.index(n.split("::", 1)[0]), position[n]))
    return [(BY_TASK_SCOPE if runs == 1 else f"{BY_TASK_SCOPE}#{run + 1}of{runs}",
             [n for n in order if run_of[about[n] or ""] == run]) for run in range(runs)]


# The longest units of a run on the CPU (durations of the whole suite on a two-core machine,
# 2026-11-28: the level-3 imports 250 s, the template compiles 250 s, the mutation compiles 120 s,
# the Ray cluster tests 150 s), handed out first, longest first, so that none of them is left to
# run alone at the end of a session while the other workers idle.
FIRST = ("tests/unit/propose/test_prompt_level3.py", "tests/unit/tasks/test_templates.py", "tests/cluster",
         "tests/unit/propose/test_mutate.py", "tests/unit/tasks/test_tasks_attention_bf16.py")


# Seconds a GPU test takes, by node id prefix (the longest that matches): the units go out the
# longest first (`units`), so that no long one starts last and runs alone while the other workers
# idle (by their number of tests, test_certify's runs of two tests of 25 s and test_preparation's
# went out last). From the GPU session's JUnit XML (bench/gpu_check.py on one H200, four workers,
# 2026-11-29), a module's mean; the BY_TASK tests as they take run by task, where a task's first
# test prepares it; the last five, which that session did not reach, estimated. Any other test
# counts DEFAULT_TEST_S, so that the CPU units go out by their number of tests.
TEST_SECONDS = {
    "tests/gpu/test_evaluator.py": 3.4,
    "tests/gpu/test_evaluator.py::test_every_task_baseline_is_ok": 8.0,
    "tests/gpu/test_template_combinations.py": 1.0,
    "tests/gpu/test_tasks_ai.py": 1.0,
    "tests/gpu/test_tma.py": 1.5,
    "tests/gpu/test_wgmma.py": 2.5,
    "tests/gpu/test_wgmma_attention.py": 2.5,
    "tests/gpu/test_module_variables.py": 1.5,
    "tests/gpu/test_template_samples.py": 1.8,
    "tests/adversarial/test_side_channels_gpu.py": 1.8,
    "tests/gpu/test_stress.py": 2.4,
    "tests/gpu/test_preparation.py": 12.0,
    "tests/gpu/test_certify.py": 19.0,
    "tests/gpu/test_certify_residue.py": 1.8,
    "tests/gpu/test_export.py": 1.2,
    "tests/gpu/test_comparator_figures.py": 15.0,
    "tests/contract/test_evaluators.py::TestGpuEvaluator": 2.8,
    "tests/gpu/test_comparators.py": 0.9,
    "tests/gpu/test_tuned_candidates.py": 10.0,
    "tests/gpu/test_fsr_faults.py": 8.0,
    "tests/gpu/test_run_devices.py": 20.0,
    "tests/gpu/test_comparators_after_campaign.py": 15.0,
}
DEFAULT_TEST_S = 1.0


def test_seconds(nodeid: str) -> float:
    """What a test is expected to take (TEST_SECONDS, else DEFAULT_TEST_S)."""
    found = [prefix for prefix in TEST_SECONDS if nodeid.startswith(prefix)]
    return TEST_SECONDS[max(found, key=len)] if found else DEFAULT_TEST_S


def scope(nodeid: str) -> str:
    """What a test is grouped by: BY_TASK_SCOPE for a BY_TASK test, its TOGETHER folder, else its
    module."""
    if by_task(nodeid) is not None:
        return BY_TASK_SCOPE
    module = nodeid.split("::", 1)[0]
    return next((folder.rstrip("/") for folder in TOGETHER if module.startswith(folder)), module)


def groups(modules: list[tuple[str, int, int]], workers: int) -> list[tuple[str, int, int]]:
    """The work units of a session of `workers`: for each module (its name, its number of
    collected tests, its spread), `spread` runs of consecutive tests (never
    more runs than tests, nor than half the workers: each run builds the module's fixtures), as (group name, first test, end), the runs of spread modules first (the largest
    spread first, then collection order) so that the longest work starts at once, then every
    other module whole, in collection order. pytest-xdist hands the units out in this order."""
    out: list[tuple[int, int, tuple[str, int, int]]] = []
    for order, (module, count, spread) in enumerate(modules):
        runs = max(1, min(spread, count, workers // 2))
        for run in range(runs):  # the longer runs first: handed out in this order, they keep the module's
            start, end = -(-count * run // runs), -(-count * (run + 1) // runs)  # order of tests
            name = module if runs == 1 else f"{module}#{run + 1}of{runs}"
            out.append((-runs if runs > 1 else 0, order, (name, start, end)))
    return [unit for _, _, unit in sorted(out, key=lambda x: (x[0], x[1]))]


def run_units(nodeids: list[str], workers: int) -> list[tuple[str, list[str]]]:
    """Every unit (its name, its node ids in the order they run), not yet in the order they are
    handed out: the BY_TASK tests' runs of whole tasks, and each module or TOGETHER folder whole
    or in SPREAD's runs."""
    by_module: dict[str, list[str]] = {}  # by scope: a module, or a TOGETHER folder's modules
    for nodeid in nodeids:
        if by_task(nodeid) is None:
            by_module.setdefault(scope(nodeid), []).append(nodeid)
    found = groups([(m, len(ids), SPREAD.get(m, 1)) for m, ids in by_module.items()], workers)
    return task_runs(nodeids, workers) + [(name, by_module[name.split("#", 1)[0]][start:end])
                                          for name, start, end in found]


def handed_out(nodeids: list[str], workers: int) -> list[tuple[str, list[str]]]:
    """`run_units` in the order they are handed out: FIRST's units, then the rest by their
    expected seconds, most first (stable; pytest-xdist's --loadscope-reorder would sort them by
    their number of tests: the scheduler turns that off to keep this order)."""
    found = run_units(nodeids, workers)
    found.sort(key=lambda u: (FIRST.index(u[0]) if u[0] in FIRST else len(FIRST), -sum(map(test_seconds, u[1]))))
    return found


def units(nodeids: list[str], workers: int) -> tuple[list[str], dict[str, str]]:
    """The units' names in the order they are handed out, and each node id's unit."""
    found = handed_out(nodeids, workers)
    return [name for name, _ in found], {n: name for name, ids in found for n in ids}


def in_unit_order(nodeids: list[str], workers: int) -> list[int]:
    """Positions of `nodeids` reordered unit by unit, as they are handed out, each unit's tests in
    the order it runs them (a worker orders its items so, and the scheduler meets each unit in
    that order)."""
    at = {n: i for i, n in enumerate(nodeids)}
    return [at[n] for _, ids in handed_out(nodeids, workers) for n in ids]


def this_run(request) -> list:  # type: ignore[no-untyped-def]
    """The items of the asking test's module that run with it on this worker: its run under a
    spread distribution (a module fixture then builds and compiles ahead what its run judges,
    not the whole module's), every item of the module otherwise. `request`: a fixture's."""
    module_items = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    mine = run_name(request)
    if not mine:
        return module_items
    unit_of = session_units(request)
    return [item for item in module_items if unit_of.get(item.nodeid) == mine]


def run_name(request) -> str:  # type: ignore[no-untyped-def]
    """The name of the asking test's run (its unit) under a spread distribution, "" otherwise (the
    whole module is one run). pytest-xdist may hand one worker two runs of a module one after the
    other, and a module fixture built for the first (`this_run`) lives on into the second: a
    fixture whose value holds only its run's work (tasks, not just programs compiled ahead) is
    keyed by this (PerRun). `request`: a function fixture's."""
    asking = getattr(request, "_pyfuncitem", None)
    if asking is None or not getattr(request.config, "workerinput", {}).get("fsr_spread"):
        return ""
    return session_units(request).get(asking.nodeid, "")


def session_units(request) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Each node id's unit in this session (`units`), worked out once a session and worker count:
    a function fixture asks for every test (over 100 ms for the GPU suite's 459 tests)."""
    session = request.session
    key = (len(session.items), worker_count(os.environ))
    cached = getattr(session, "_fsr_units", None)
    if cached is None or cached[0] != key:
        cached = (key, units([item.nodeid for item in session.items], key[1])[1])
        session._fsr_units = cached
    return cached[1]


class PerRun(Generic[T]):
    """A module's value for the run of the test asking (run_name): built for a run on its first
    test, the previous run's closed first (its tests are done: runs are handed out whole)."""

    def __init__(self, build: Callable[[Any], T], close: Callable[[T], None]):
        self.build, self.close = build, close
        self.run: str | None = None
        self.value: T | None = None

    def get(self, request) -> T:  # type: ignore[no-untyped-def]
        run = run_name(request)
        if self.value is None or run != self.run:
            self.done()
            self.value, self.run = self.build(request), run
        return self.value

    def done(self) -> None:
        if self.value is not None:
            value, self.value = self.value, None
            self.close(value)


def run_params(request, *names: str) -> list[tuple]:  # type: ignore[no-untyped-def]
    """The parameters `names` of this_run's parametrized items, in order, each once."""
    found = [tuple(item.callspec.params[n] for n in names) for item in this_run(request)
             if hasattr(item, "callspec") and all(n in item.callspec.params for n in names)]
    return list({repr(p): p for p in found}.values())


def scheduler(config, log):  # type: ignore[no-untyped-def]
    """pytest-xdist's module scheduling with SPREAD's modules cut into runs: a unit is a module or a
    run of one, handed out in the order the workers collected them (already unit by unit)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the units come ordered (units)

    class SpreadScheduling(LoadScopeScheduling):
        unit_of: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.unit_of is None:
                self.unit_of = units(list(self.collection or []), len(self.nodes))[1]
            return self.unit_of.get(nodeid) or scope(nodeid)

    return SpreadScheduling(config, log)


def visible_devices(environ: Mapping[str, str], count: int) -> list[str]:
    """The devices this process may use, named as CUDA_VISIBLE_DEVICES names them: its entries where
    it is set (indices or UUIDs), else 0 .. count - 1."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(count)]


def worker_device(worker_id: str, devices: list[str]) -> str | None:
    """The one device worker `worker_id` uses: the workers take the devices in turn (more workers
    than devices share them); None outside a worker or without a device."""
    match = WORKER_ID.match(worker_id)
    if match is None or not devices:
        return None
    return devices[int(match.group(1)) % len(devices)]


def worker_count(environ: Mapping[str, str]) -> int:
    """How many pytest-xdist workers run this session (1 without xdist)."""
    try:
        return max(1, int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def host_threads(environ: Mapping[str, str] = os.environ, cores: int | None = None) -> int:
    """The host threads a test's GPU child may use (EvalConfig.host_threads): this worker's share
    of the cores under pytest-xdist, so the workers' float64 references do not each take every
    core; 0 (every core, fsr's default) without xdist."""
    workers = worker_count(environ)
    if workers == 1:
        return 0
    return max(1, (cores or host.cores()) // workers)


def sharers(worker_id: str, workers: int, devices: list[str]) -> int:
    """How many of the session's `workers` use the device worker `worker_id` uses (itself
    included): 1 outside a worker or where each worker has a device of its own."""
    mine = worker_device(worker_id, devices)
    if mine is None:
        return 1
    return max(1, sum(worker_device(f"gw{i}", devices) == mine for i in range(workers)))


def gpu_sharers(environ: Mapping[str, str] = os.environ) -> int:
    """How many workers use this worker's GPU, itself included (SHARERS_ENV, set by
    tests/conftest.py; 1 outside pytest-xdist or where each worker has a GPU of its own)."""
    try:
        return max(1, int(environ.get(SHARERS_ENV, "1") or 1))
    except ValueError:
        return 1


def device_budget(total_bytes: int, share: int, fraction: float = 0.65) -> int:
    """`eval.prepared_max_bytes` for a GPU child of a worker that shares its device with
    `share - 1` others: their part of the `fraction` a child keeps alone (0, the child's own
    default, where the device is not shared or its size is unknown)."""
    if share <= 1 or total_bytes <= 0:
        return 0
    return int(total_bytes * fraction / share)


@functools.cache
def shared_budget() -> int:
    """`eval.prepared_max_bytes` for a GPU child this worker starts: its part of the GPU where
    other workers share it (each child would keep 65% of the device alone), else 0 (the child's
    own default). The device's size is asked in a subprocess, so this process never starts CUDA."""
    share = gpu_sharers()
    if share <= 1:
        return 0
    code = "import cupy; print(cupy.cuda.Device().mem_info[1])"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        total = int(out.stdout.strip() or 0) if out.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, OSError):
        total = 0
    return device_budget(total, share)
