"""The GPU tests over every GPU (tests/conftest.py, tests/support/xdist_gpus.py): `-n auto` starts a few
pytest-xdist workers per visible GPU, each worker sees its own GPU alone, a module stays on one
worker unless spread over several, and `whole_machine` tests skip where other workers run beside them. Device counts faked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import conftest
from tests.support import xdist_gpus


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    """Fake the visible GPU count that conftest asks a subprocess for."""

    def fake(count: int) -> None:
        monkeypatch.setattr(conftest, "cuda_device_count", lambda: count)

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    return fake


@pytest.mark.parametrize(("count", "cores", "workers"), [
    (1, 16, 4), (2, 32, 8), (4, 64, 16),  # an H200 host's 16 cores a GPU: four workers each
    (1, 2, 1), (2, 8, 2), (8, 16, 8),  # few cores: one worker a GPU, never none
    (1, 128, 4),  # many: at most MAX_PER_GPU
    (0, 64, 64), (0, 2, 2),  # no GPU: one a core (as CI runs the README's `-n auto`)
])
def test_auto_starts_a_few_workers_per_gpu_as_the_cores_allow(gpus, monkeypatch, count, cores, workers):
    gpus(count)
    monkeypatch.delenv(xdist_gpus.WORKERS_PER_GPU_ENV, raising=False)
    monkeypatch.setattr(xdist_gpus.host, "cores", lambda: cores)
    assert conftest.pytest_xdist_auto_num_workers(SimpleNamespace()) == workers


def test_workers_per_gpu_can_be_asked_for(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setenv(xdist_gpus.WORKERS_PER_GPU_ENV, "3")
    assert conftest.pytest_xdist_auto_num_workers(SimpleNamespace()) == 6
    monkeypatch.setenv(xdist_gpus.WORKERS_PER_GPU_ENV, "many")  # not a number: the cores decide
    assert xdist_gpus.per_gpu(2, 32, {xdist_gpus.WORKERS_PER_GPU_ENV: "many"}) == 4


def test_xdists_own_worker_count_variable_wins(gpus, monkeypatch):
    gpus(4)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(SimpleNamespace()) is None  # xdist reads it itself


@pytest.mark.parametrize(("visible", "count", "worker", "pinned"), [
    (None, 4, "gw0", "0"), (None, 4, "gw3", "3"),
    ("2,5", 2, "gw0", "2"), ("2,5", 2, "gw1", "5"),  # the devices this run was given, not the host's
    ("GPU-aa,GPU-bb", 2, "gw1", "GPU-bb"),
    (None, 2, "gw3", "1"),  # more workers than GPUs: they share them in turn
])
def test_each_worker_sees_its_own_gpu_before_anything_starts_cuda(gpus, monkeypatch, visible, count, worker, pinned):
    gpus(count)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    conftest.pytest_configure(SimpleNamespace())
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == pinned


def test_outside_a_worker_or_without_a_gpu_nothing_is_pinned(gpus, monkeypatch):
    import os

    gpus(0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    conftest.pytest_configure(SimpleNamespace())
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # no GPU: nothing to pin to
    gpus(2)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    conftest.pytest_configure(SimpleNamespace())
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # not a worker: every GPU stays visible


def test_worker_ids_and_thread_shares():
    assert xdist_gpus.worker_device("master", ["0", "1"]) is None
    assert xdist_gpus.worker_device("gw0", []) is None
    assert xdist_gpus.visible_devices({"CUDA_VISIBLE_DEVICES": ""}, 4) == []  # set and empty: none
    assert xdist_gpus.host_threads({}, cores=32) == 0  # no xdist: fsr's default, every core
    assert xdist_gpus.host_threads({"PYTEST_XDIST_WORKER_COUNT": "4"}, cores=32) == 8
    assert xdist_gpus.host_threads({"PYTEST_XDIST_WORKER_COUNT": "64"}, cores=32) == 1


@pytest.mark.parametrize(("numprocesses", "dist", "after"), [
    (2, "no", conftest.SPREAD_DIST),  # -n without --dist: modules on one worker, the heaviest spread
    (2, "load", "load"),  # a --dist of the command line's stands
    (None, "no", "no"),  # no -n: no distribution
])
def test_a_module_stays_on_one_worker(numprocesses, dist, after):
    config = SimpleNamespace(option=SimpleNamespace(numprocesses=numprocesses, dist=dist))
    conftest.pytest_cmdline_main(config)
    assert config.option.dist == after
    ours = getattr(config.option, "fsr_spread", False)
    assert ours == (after == conftest.SPREAD_DIST)
    if not ours:  # pytest-xdist's own scheduler
        assert conftest.pytest_xdist_make_scheduler(config, None) is None


def test_spread_modules_are_cut_into_runs_of_consecutive_tests_and_handed_out_first():
    modules = [("a.py", 5, 1), ("b.py", 10, 3), ("c.py", 2, 4), ("d.py", 7, 2)]
    units = xdist_gpus.groups(modules, workers=16)
    assert units == [("b.py#1of3", 0, 4), ("b.py#2of3", 4, 7), ("b.py#3of3", 7, 10),  # the longer first
                     ("c.py#1of2", 0, 1), ("c.py#2of2", 1, 2),  # never more runs than tests
                     ("d.py#1of2", 0, 4), ("d.py#2of2", 4, 7),
                     ("a.py", 0, 5)]
    for module, count, _ in modules:  # every test in exactly one run
        covered = [i for name, start, end in units if name.split("#")[0] == module for i in range(start, end)]
        assert covered == list(range(count))
    # few workers: a module on at most half of them (each run builds the module's fixtures)
    assert [u[0] for u in xdist_gpus.groups(modules, workers=4)] == [
        "b.py#1of2", "b.py#2of2", "c.py#1of2", "c.py#2of2", "d.py#1of2", "d.py#2of2", "a.py"]
    assert xdist_gpus.groups(modules, workers=2) == [(m, 0, n) for m, n, _ in modules]


def test_workers_order_their_items_unit_by_unit_and_the_scheduler_finds_the_same_units(monkeypatch):
    monkeypatch.setattr(xdist_gpus, "SPREAD", {"t/heavy.py": 2})
    ids = ["t/a.py::x", "t/heavy.py::p[1]", "t/heavy.py::p[2]", "t/heavy.py::q", "t/heavy.py::r", "t/b.py::y"]
    order = [ids[i] for i in xdist_gpus.in_unit_order(ids, workers=8)]
    assert order == ["t/heavy.py::p[1]", "t/heavy.py::p[2]", "t/heavy.py::q", "t/heavy.py::r", "t/a.py::x", "t/b.py::y"]
    names, unit_of = xdist_gpus.units(order, workers=8)  # the controller sees the workers' order
    assert names == ["t/heavy.py#1of2", "t/heavy.py#2of2", "t/a.py", "t/b.py"]
    assert [unit_of[n] for n in order] == ["t/heavy.py#1of2"] * 2 + ["t/heavy.py#2of2"] * 2 + ["t/a.py", "t/b.py"]
    assert xdist_gpus.units(ids, workers=8)[1] == unit_of  # the same units from either order


def test_whole_machine_tests_skip_beside_other_workers(gpus, monkeypatch):
    gpus(2)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # no grouping (this test may run in a worker)
    items = [SimpleNamespace(keywords={"gpu", "whole_machine"}, marks=[]),
             SimpleNamespace(keywords={"gpu"}, marks=[])]
    for item in items:
        item.add_marker = item.marks.append
        # the conftest reads markers, not keywords (a folder named gpu/ is a keyword too)
        item.get_closest_marker = lambda name, keywords=item.keywords: name if name in keywords else None
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    conftest.pytest_collection_modifyitems(SimpleNamespace(), items)
    assert items[0].marks == [] and items[1].marks == []  # one worker: the machine is its own
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    conftest.pytest_collection_modifyitems(SimpleNamespace(), items)
    assert [m.name for m in items[0].marks] == ["skip"] and items[1].marks == []
    assert "pytest -m whole_machine" in items[0].marks[0].kwargs["reason"]


def test_workers_sharing_a_device_split_its_memory() -> None:
    devices = ["0", "1"]
    assert [xdist_gpus.sharers(f"gw{i}", 4, devices) for i in range(4)] == [2, 2, 2, 2]
    assert [xdist_gpus.sharers(f"gw{i}", 3, devices) for i in range(3)] == [2, 1, 2]
    assert xdist_gpus.sharers("gw0", 2, devices) == 1 and xdist_gpus.sharers("master", 2, devices) == 1
    assert xdist_gpus.gpu_sharers({}) == 1 and xdist_gpus.gpu_sharers({xdist_gpus.SHARERS_ENV: "4"}) == 4
    assert xdist_gpus.gpu_sharers({xdist_gpus.SHARERS_ENV: "x"}) == 1  # not a number: alone
    assert xdist_gpus.device_budget(100, 1) == 0  # alone: the child's own default
    assert xdist_gpus.device_budget(100, 4) == 16 and xdist_gpus.device_budget(0, 4) == 0


def test_a_module_fixture_builds_for_its_own_run_only(monkeypatch):
    monkeypatch.setattr(xdist_gpus, "SPREAD", {"t/heavy.py": 2})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    heavy, other = object(), object()

    def item(nodeid, module, **params):
        return SimpleNamespace(nodeid=nodeid, module=module, callspec=SimpleNamespace(params=params))

    items = [item(f"t/heavy.py::t[{i}]", heavy, name=f"task{i // 2}", values={"X": i}) for i in range(4)]
    items.append(item("t/other.py::u", other, name="x", values={}))
    request = SimpleNamespace(session=SimpleNamespace(items=items), module=heavy, _pyfuncitem=items[2],
                              config=SimpleNamespace(workerinput={"fsr_spread": True}))
    assert xdist_gpus.this_run(request) == items[2:4]  # the second run of two
    assert xdist_gpus.run_params(request, "name") == [("task1",)]  # each once
    assert xdist_gpus.run_params(request, "name", "values") == [("task1", {"X": 2}), ("task1", {"X": 3})]
    assert xdist_gpus.run_name(request) == "t/heavy.py#2of2"
    # a worker handed both runs, one after the other: a value kept per run is built again for the second
    built, closed = [], []
    runs = xdist_gpus.PerRun(lambda r: built.append(xdist_gpus.run_params(r, "name")) or len(built), closed.append)
    for asking in (items[0], items[1], items[2], items[3]):
        request._pyfuncitem = asking
        assert runs.get(request) == (1 if asking in items[:2] else 2)
    assert built == [[("task0",)], [("task1",)]] and closed == [1]
    runs.done()
    assert closed == [1, 2]
    request.config = SimpleNamespace()  # no spread distribution (no xdist): the whole module
    assert xdist_gpus.this_run(request) == items[:4] and xdist_gpus.run_name(request) == ""


def test_the_ray_cluster_tests_are_one_unit_so_one_cluster_starts():
    """tests/cluster's modules share a package fixture's local Ray cluster: one worker runs them
    all; modules elsewhere stay units of their own, a spread module's runs its own."""
    ids = ["tests/cluster/test_a.py::x", "tests/cluster/test_a.py::y", "tests/cluster/test_b.py::z",
           "tests/unit/cluster/test_c.py::w", "tests/unit/test_d.py::v"]
    names, unit_of = xdist_gpus.units(ids, workers=2)
    assert names == ["tests/cluster", "tests/unit/cluster/test_c.py", "tests/unit/test_d.py"]
    assert {unit_of[n] for n in ids[:3]} == {"tests/cluster"}
    assert xdist_gpus.scope("tests/unit/cluster/test_c.py::w") == "tests/unit/cluster/test_c.py"


def test_the_longest_units_without_a_gpu_are_handed_out_first_then_the_most_tests(monkeypatch):
    monkeypatch.setattr(xdist_gpus, "FIRST", ("t/long.py", "t/longer"))
    ids = ["t/a.py::x", "t/b.py::y1", "t/b.py::y2", "t/long.py::z", "t/longer/test_c.py::w", "t/d.py::v"]
    names, _ = xdist_gpus.units(ids, workers=2)
    assert names == ["t/long.py", "t/b.py", "t/a.py", "t/longer/test_c.py", "t/d.py"]  # not a TOGETHER folder
    monkeypatch.setattr(xdist_gpus, "TOGETHER", ("t/longer/",))
    assert xdist_gpus.units(ids, workers=2)[0] == ["t/long.py", "t/longer", "t/b.py", "t/a.py", "t/d.py"]
    from xdist.scheduler import LoadScopeScheduling

    monkeypatch.setattr(LoadScopeScheduling, "__init__", lambda self, config, log: None)  # no session here
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True))
    xdist_gpus.scheduler(config, None)
    assert config.option.loadscopereorder is False  # pytest-xdist keeps the units' order


def test_the_tests_on_the_session_evaluator_go_by_task_each_task_s_together(monkeypatch):
    """BY_TASK's tests are cut into runs of whole tasks (the task: the table's, or where it gives
    none the first word of a test's parameters), every module's tests of a task one after
    another, the baseline's first; the same runs whichever order the node ids come in."""
    monkeypatch.setattr(xdist_gpus, "BY_TASK", {"t/base.py::every[": None, "t/combos.py::": None,
                                                "t/tma.py::": "gemm", "t/tma.py::clusters": "gelu"})
    monkeypatch.setattr(xdist_gpus, "_task_rank", lambda: {"gelu": 0, "scan": 1, "gemm": 2})  # the lightest first
    ids = ["t/base.py::every[gelu]", "t/base.py::every[gemm]", "t/base.py::every[scan]", "t/base.py::other",
           "t/combos.py::c[scan-A1]", "t/combos.py::c[gelu-A0]", "t/combos.py::c[gelu-A1]", "t/tma.py::clusters",
           "t/tma.py::plain[scan-B]", "t/combos.py::c[gemm-A0]", "t/x.py::y"]
    assert [xdist_gpus.by_task(n) for n in ids] == ["gelu", "gemm", "scan", None, "scan", "gelu", "gelu", "gelu",
                                                    "gemm", "gemm", None]  # the table's task over a parameter's
    assert xdist_gpus.by_task("t/combos.py::c[other-A0]") == ""  # names none: a run of its own
    first, second = f"{xdist_gpus.BY_TASK_SCOPE}#1of2", f"{xdist_gpus.BY_TASK_SCOPE}#2of2"
    runs = dict(xdist_gpus.run_units(ids, workers=4))  # two runs: half the workers
    assert runs[first] == ["t/base.py::every[gelu]", "t/combos.py::c[gelu-A0]", "t/combos.py::c[gelu-A1]",
                           "t/tma.py::clusters", "t/base.py::every[gemm]", "t/combos.py::c[gemm-A0]",
                           "t/tma.py::plain[scan-B]"]  # the lightest task first, dealt out in turn
    assert runs[second] == ["t/base.py::every[scan]", "t/combos.py::c[scan-A1]"]
    assert runs["t/base.py"] == ["t/base.py::other"] and runs["t/x.py"] == ["t/x.py::y"]
    names, unit_of = xdist_gpus.units(ids, workers=4)
    assert names == [first, second, "t/base.py", "t/x.py"]
    order = [ids[i] for i in xdist_gpus.in_unit_order(ids, workers=4)]
    assert order == runs[first] + runs[second] + ["t/base.py::other", "t/x.py::y"]
    assert xdist_gpus.units(order, workers=4) == (names, unit_of)  # the controller sees the workers' order
    assert list(xdist_gpus.run_units(ids, workers=2)[0][1]) == sorted(  # one run: every task's tests
        runs[first] + runs[second], key=lambda n: ["gelu", "scan", "gemm"].index(xdist_gpus.by_task(n) or ""))
    # a module fixture of a run (tests.support.xdist_gpus.this_run) builds for that run's tests only
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    combos, base = object(), object()
    items = [SimpleNamespace(nodeid=n, module=combos if n.startswith("t/combos") else base) for n in order]
    request = SimpleNamespace(session=SimpleNamespace(items=items), module=combos, _pyfuncitem=items[1],
                              config=SimpleNamespace(workerinput={"fsr_spread": True}))
    assert [i.nodeid for i in xdist_gpus.this_run(request)] == ["t/combos.py::c[gelu-A0]", "t/combos.py::c[gelu-A1]",
                                                                "t/combos.py::c[gemm-A0]"]


def test_units_go_out_by_their_expected_seconds_the_longest_first(monkeypatch):
    """A unit of two long GPU tests goes out before one of five short ones (TEST_SECONDS); tests
    it does not name count DEFAULT_TEST_S each, so other units go by their number of tests."""
    monkeypatch.setattr(xdist_gpus, "TEST_SECONDS", {"t/long.py": 20.0, "t/long.py::quick": 0.5, "t/short.py": 2.0})
    ids = ["t/short.py::a", "t/short.py::b", "t/short.py::c", "t/short.py::d", "t/short.py::e",
           "t/long.py::x", "t/long.py::y", "t/long.py::quick", "t/cpu.py::f", "t/cpu.py::g", "t/one.py::h"]
    assert xdist_gpus.test_seconds("t/long.py::quick") == 0.5 and xdist_gpus.test_seconds("t/cpu.py::f") == 1.0
    names, _ = xdist_gpus.units(ids, workers=2)
    assert names == ["t/long.py", "t/short.py", "t/cpu.py", "t/one.py"]  # 40.5 s, 10 s, 2 s, 1 s


def test_the_tables_name_test_modules_functions_and_tasks_that_exist():
    """BY_TASK's and TEST_SECONDS's prefixes name a test module (and in it a test function or
    class where they go on), BY_TASK's tasks are tasks: a renamed test would otherwise leave its
    run by task, or its place in the order, without a word."""
    from fsr import tasks
    from tests.support.paths import ROOT

    for prefix in [*xdist_gpus.BY_TASK, *xdist_gpus.TEST_SECONDS]:
        module, _, rest = prefix.partition("::")
        assert (ROOT / module).is_file(), prefix
        name = rest.split("[")[0]
        text = (ROOT / module).read_text()
        assert not name or f"def {name}(" in text or f"class {name}(" in text, prefix
    assert {t for t in xdist_gpus.BY_TASK.values() if t is not None} <= set(tasks.list_tasks())
