"""bench/gpu_check.py without a GPU: where the tests and the gates go for each number of GPUs, the
gates' share of the budget, results read from pytest's XML or its -v lines, the summary and its
ratio from faked steps, the order of the steps on one GPU, its arguments, and `prepare` unpacking
a ref of a git repository (bench/scale.py's --json figures come from a hand-built lineage)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support.lineage_rows import T0, row, write_run
from tests.support.paths import ROOT


def load(name: str):
    """A bench script as a module; bench/ on the path while it loads, as for a script run there
    (gpu_check imports gpu_check_summary beside it)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


gc = load("gpu_check")
summary_of = load("gpu_check_summary")


@pytest.mark.parametrize(("gpus", "tests", "lanes"), [
    (["0"], ("0",), (("0", ("tree",)), ("0", ("ref",)))),  # one GPU: after the tests, side by side on it
    (["0", "1"], ("0",), (("1", ("tree",)), ("1", ("ref",)))),  # side by side on the one they share
    (["0", "1", "2"], ("0",), (("1", ("tree",)), ("2", ("ref",)))),  # side by side from three
    (["4", "5", "6", "7"], ("4", "5"), (("6", ("tree",)), ("7", ("ref",)))),
])
def test_tests_take_all_but_the_gates_gpus(gpus, tests, lanes):
    plan = gc.layout(gpus)
    assert (plan.tests, plan.lanes) == (tests, lanes)


def test_without_tests_or_without_a_ref_the_gpus_go_elsewhere():
    assert gc.layout(["0", "1"], tests=False).lanes == (("0", ("tree",)), ("1", ("ref",)))
    assert gc.layout(["0"], tests=False).lanes == (("0", ("tree",)), ("0", ("ref",)))
    assert gc.layout(["0"], tests=False).words == "the gates side by side on 0, sharing it, no tests"
    assert gc.layout(["0", "1", "2"], ("tree",)).lanes == (("2", ("tree",)),)
    assert gc.layout(["0", "1"], ()) == gc.Layout(("0", "1"), (), "tests on 0,1, no gates")


def test_gates_one_after_the_other_share_what_is_left():
    assert gc.gate_wall_s(480, 2) == (480 - 2 * gc.GATE_OVERHEAD_S) / 2
    assert gc.gate_wall_s(2000, 1) == gc.GATE_MAX_WALL_S  # never past fsr bench's own default
    assert gc.gate_wall_s(200, 2) < gc.MIN_GATE_S  # too little: left out


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.gpu.test_a" name="test_ok" time="12.5"/>
<testcase classname="tests.gpu.test_a" name="test_slow[x]" time="40.0"/>
<testcase classname="tests.gpu.test_b" name="test_bad" time="3.0"><failure message="no">x</failure></testcase>
<testcase classname="tests.gpu.test_b" name="test_setup" time="1.0"><error message="fixture">x</error></testcase>
<testcase classname="tests.gpu.test_c" name="test_skip" time="99.0"><skipped message="needs"/></testcase>
</testsuite></testsuites>"""


def test_results_from_the_xml_and_from_the_lines_of_a_cut_run(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text(JUNIT)
    found = summary_of.junit_results(xml)
    assert {k: found[k] for k in ("passed", "failed", "errors", "skipped")} == \
        {"passed": 2, "failed": 1, "errors": 1, "skipped": 1}
    assert found["failures"] == ["tests.gpu.test_b::test_bad", "tests.gpu.test_b::test_setup"]
    assert found["slowest"][0] == {"test": "tests.gpu.test_a::test_slow[x]", "s": 40.0}  # skipped ones not timed
    assert summary_of.junit_results(tmp_path / "none.xml") is None
    log = "\n".join(["[gw0] [ 10%] PASSED tests/gpu/test_a.py::test_ok",
                     "tests/gpu/test_t.py::test_x[8] PASSED                 [ 20%]",
                     "[gw1] [ 30%] FAILED tests/gpu/test_b.py::test_bad",
                     "[gw1] [ 40%] SKIPPED tests/gpu/test_c.py::test_skip",
                     "FAILED tests/gpu/test_b.py::test_bad - AssertionError: no",  # the summary repeats it
                     "collected 4 items"])
    cut = summary_of.log_results(log)
    assert (cut["passed"], cut["failed"], cut["skipped"], cut["failures"]) == (2, 1, 1, ["tests/gpu/test_b.py::test_bad"])


def gate(per_minute: float, label: str) -> dict:
    return {"label": label, "per_gpu_minute": per_minute, "preparing_share": 0.25, "evaluations": 384,
            "wall_s": 200.0, "max_wall_s": 180.0, "gpu": "1", "cut": False}


def step(**values) -> dict:
    return {"passed": 10, "failed": 0, "errors": 0, "skipped": 1, "failures": [], "slowest": [], "wall_s": 60.0,
            "gpus": ["0"], "returncode": 0, "cut": False, "limit_s": 420.0, "log": "tests-gpu.log", **values}


class Order(list):
    """The steps in the order they ran, and the cores each was given (`cores`)."""

    cores: list[tuple]


@pytest.fixture
def faked(monkeypatch, tmp_path):
    """gpu_check with its steps faked: each records when it ran, and the gates give figures."""
    order = Order()
    cores_seen: list[tuple] = []
    monkeypatch.setattr(gc.os, "sched_getaffinity", lambda pid: set(range(8)))

    def tests_step(name, marks, gpus, out, limit_s, per_gpu=1, cores=None):
        order.append(f"tests {name} on {','.join(gpus)}")
        cores_seen.append(("tests", name, cores))
        return step(gpus=list(gpus), failed=1 if name == "gpu" and "FAIL" in str(out) else 0)

    def gate_step(tree, root, gpu, out, max_wall_s, tasks, cores=None, certify=""):
        order.append(f"gate {tree} on {gpu} ({int(max_wall_s)} s, {' '.join(tasks)})" + (f" --certify {certify}" if certify else ""))
        cores_seen.append(("gate", tree, cores))
        return gate(130.0 if tree == "tree" else 100.0, tree) | {"max_wall_s": max_wall_s}

    monkeypatch.setattr(gc, "tests_step", tests_step)
    monkeypatch.setattr(gc, "gate_step", gate_step)
    (tmp_path / "ref").mkdir()
    monkeypatch.setattr(gc, "STATE", tmp_path)
    order.cores = cores_seen
    return order


def test_one_gpu_runs_the_tests_first_then_both_gates_on_it(faked, tmp_path, capsys):
    code = gc.main(["run", "--out", str(tmp_path / "out"), "--gpus", "0", "--budget-s", "2000", "softmax"])
    assert code == 0
    assert faked[:2] == ["tests whole_machine on 0", "tests gpu on 0"]  # the gates at once, after them
    assert sorted(faked[2:]) == ["gate ref on 0 (420 s, softmax)", "gate tree on 0 (420 s, softmax)"]
    summary = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert summary["ratio"] == pytest.approx(1.3) and summary["layout"].startswith("one GPU (0)")
    printed = capsys.readouterr().out
    assert "ratio (tree / ref, evaluations per GPU-minute): 1.300" in printed
    assert "gate (tree, tree): 130.0 evaluations per GPU-minute, preparing 25%" in printed


def test_with_too_little_left_the_gates_are_left_out_and_say_how_to_run_them(faked, tmp_path):
    code = gc.main(["run", "--out", str(tmp_path / "out"), "--gpus", "0", "--budget-s", "140"])  # 80 s: under 90
    summary = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert code == 0 and summary["gates"] == {} and summary["ratio"] is None
    assert [n for n in summary["notes"] if "--skip-tests" in n]
    assert faked == ["tests whole_machine on 0", "tests gpu on 0"]


def test_two_gpus_run_the_gates_beside_the_tests_and_a_failure_fails_the_call(faked, tmp_path):
    code = gc.main(["run", "--out", str(tmp_path / "FAIL"), "--gpus", "0,1", "--budget-s", "540"])
    assert code == 1
    gates = [line for line in faked if line.startswith("gate")]
    assert sorted(g.split(" (")[0] for g in gates) == ["gate ref on 1", "gate tree on 1"]  # side by side
    assert gates[0].split(" (")[1] == gates[1].split(" (")[1]  # the same --max-wall, each the whole of it
    assert int(gates[0].split("(")[1].split(" ")[0]) == 420
    assert faked[0] == "tests whole_machine on 0" and "tests gpu on 0" in faked
    # each keeps to its GPU's share of the host's eight cores: the tests beside the gates to GPU 0's
    shares = {(kind, name): cores for kind, name, cores in faked.cores}
    assert shares[("gate", "tree")] == shares[("gate", "ref")] == [4, 5, 6, 7]
    assert shares[("tests", "gpu")] == [0, 1, 2, 3]


def test_a_gpu_s_share_of_the_cores():
    assert gc.core_shares(["0", "1"], [3, 1, 0, 2]) == {"0": [0, 1], "1": [2, 3]}
    assert gc.core_shares(["0", "1", "2"], list(range(8))) == {"0": [0, 1], "1": [2, 3], "2": [4, 5]}
    assert gc.core_shares(["0", "1"], [5]) == {"0": [5], "1": [5]}  # fewer cores than GPUs: all for each


def test_summary_lines_name_failures_cuts_and_a_gate_without_figures():
    summary = {"layout": "tests on 0", "commits": {}, "wall_s": 10.0, "notes": ["left out"], "ratio": None,
               "tests": {"gpu": step(failed=1, failures=["tests.gpu.test_b::test_bad"], cut=True, returncode=2)},
               "gates": {"tree": {"label": "tree", "error": "exit 1: see its log"}}}
    text = "\n".join(summary_of.lines(summary))
    assert "1 failed" in text and "FAILED tests.gpu.test_b::test_bad" in text and "cut at 420 s" in text
    assert "pytest exit 2" in text and "gate (tree): no figures (exit 1: see its log)" in text
    assert "note: left out" in text and summary_of.failed(summary)
    assert not summary_of.failed({"tests": {"gpu": step(returncode=5)}, "gates": {"tree": gate(1.0, "t")}})


def test_a_certifying_gate_s_line_says_what_failed_and_how_its_bests_held():
    certifying = gate(70.0, "tree") | {"certifications": 17, "certified": {
        "failed": {"nbody": "timing (1)"}, "certified_over_screened": {"a": 1.0, "b": 1.02, "c": 1.01},
        "fresh_over_screening_sets": {"x": 0.99, "y": 1.04}}}
    summary = {"layout": "tests on 0", "commits": {}, "wall_s": 10.0, "notes": [], "ratio": None, "tests": {},
               "gates": {"tree": certifying, "ref": gate(72.0, "ref")}}
    text = summary_of.lines(summary)
    assert text[2] == ("  certifications: 17, nbody: timing (1); the bests as certified over screened: median 1.010, "
                       "at most 1.020; fresh inputs over the screening's sets: median 1.015, at most 1.040")
    assert text[3].startswith("gate (ref, ") and len(text) == 4  # an uncertified gate: no such line


def test_arguments_are_checked_in_one_line(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_:
        gc.main(["run", "--gpus", "0"])  # no --out
    assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        gc.main(["run", "--out", str(tmp_path), "--skip-tests", "--skip-gates"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gc.main(["run", "--out", str(tmp_path)]) == 3
    assert "no GPU visible" in capsys.readouterr().err


def test_prepare_unpacks_the_ref_that_the_branch_started_from(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                       capture_output=True)

    git("init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".gpucheck/\n")
    (repo / "f.txt").write_text("main\n")
    git("add", ".")
    git("commit", "-q", "-m", "on main")
    git("checkout", "-q", "-b", "work")
    (repo / "f.txt").write_text("work\n")
    git("commit", "-q", "-am", "on the branch")
    assert gc.prepare(None, repo) == 0
    assert (repo / ".gpucheck" / "ref" / "f.txt").read_text() == "main\n"
    info = json.loads((repo / ".gpucheck" / "ref.json").read_text())
    assert info["how"] == "git merge-base HEAD main" and info["ref_subject"] == "on main"
    assert "WARNING" not in capsys.readouterr().out
    git("checkout", "-q", "main")  # on main itself: the commit before
    (repo / "f.txt").write_text("next\n")
    git("commit", "-q", "-am", "next on main")
    assert gc.prepare(None, repo) == 0
    assert (repo / ".gpucheck" / "ref" / "f.txt").read_text() == "main\n"
    assert gc.prepare("no-such-ref", repo) == 2


def test_a_tree_changed_after_prepare_is_named_so(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / ".gitignore").write_text(".gpucheck/\n")
    (repo / "f.txt").write_text("one\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"], cwd=repo,
                   check=True)
    assert gc.prepare("HEAD", repo) == 0
    info = json.loads((repo / ".gpucheck" / "ref.json").read_text())
    assert info["files"] == [".gitignore", "f.txt"]
    assert gc.tree_named(repo, info) is None  # the tree prepare saw
    (repo / "f.txt").write_text("two\n")  # edited after prepare: the call runs other files
    assert "changed since" in (gc.tree_named(repo, info) or "")
    (repo / "f.txt").write_text("one\n")
    assert gc.tree_named(repo, info) is None
    assert gc.tree_named(repo, {"tree": "abc"}) is None  # a ref.json from before the digest: nothing said


def test_scale_writes_its_figures_as_json(tmp_path):
    scale = load("scale")
    rows = [row(candidate_id=f"c{i}", worker="gpu0", wall_s=2.0, setup_s=1.0 if i == 0 else 0.0,
                started_at=T0, finished_at=T0) for i in range(6)]
    run_dir = write_run(tmp_path / "run", rows)
    figures = scale.report("t", run_dir, 1, 60.0)
    assert figures["evaluations"] == 6 and figures["per_gpu_minute"] == pytest.approx(6.0)
    assert figures["preparing_share"] == pytest.approx(1.0 / 12.0) and figures["most_preparations"] == 1
    json.dumps(figures)  # plain JSON


def test_the_tests_step_runs_pytest_on_its_gpus_one_worker_each(monkeypatch, tmp_path):
    seen: dict[str, Any] = {}

    def run_bounded(command, env, log, limit_s, cwd=gc.ROOT, cores=None):
        seen.update(command=command, gpus=env["CUDA_VISIBLE_DEVICES"], limit_s=limit_s, warm=env["FSR_TEST_WARM_LOG"])
        (tmp_path / "tests-gpu.xml").write_text(JUNIT)
        log.write_text("")
        return 1, False

    monkeypatch.setattr(gc, "run_bounded", run_bounded)
    monkeypatch.setattr(gc, "timeout_plugin", lambda: (2, 4))
    found = gc.tests_step("gpu", "gpu and not whole_machine", ("2", "3"), tmp_path, 400.0)
    command = seen["command"]
    assert seen["gpus"] == "2,3" and command[command.index("-n") + 1] == "2"
    assert seen["warm"] == str(tmp_path / "tests-gpu-warm.log")  # the contents warm-up's log comes back
    assert command[command.index("-m", 3) + 1] == "gpu and not whole_machine"
    assert command[command.index("--session-timeout") + 1] == "340" and "--timeout" in command
    assert command[-len(gc.marked_modules("gpu")):] == gc.marked_modules("gpu")  # these modules, not the tree
    assert (found["passed"], found["failed"], found["returncode"]) == (2, 1, 1)
    monkeypatch.setattr(gc, "timeout_plugin", lambda: (0, 0))  # without pytest-timeout: no option it lacks
    gc.tests_step("gpu", "gpu", ("0",), tmp_path, 400.0)
    assert "-n" not in seen["command"] and "--timeout" not in seen["command"]


COLLECTED = """
import json, os

def pytest_collection_finish(session):
    marks = {item.nodeid: sorted(m.name for m in item.iter_markers()) for item in session.items}
    with open(os.environ["FSR_COLLECTED"], "w") as f:
        json.dump(marks, f)
"""


def test_a_step_collects_the_modules_of_every_test_its_marks_select(tmp_path):
    """What the tests steps collect instead of the whole tree (`marked_modules`) is every module
    that holds a test with the markers the step's -m requires, by a collection of the whole tree."""
    (tmp_path / "collected_plugin.py").write_text(COLLECTED)
    env = {**os.environ, "FSR_COLLECTED": str(tmp_path / "marks.json"),
           "PYTHONPATH": f"{tmp_path}:{ROOT}", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "collected_plugin", "-m", "gpu", "tests"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    marks = json.loads((tmp_path / "marks.json").read_text())
    for expression, required in (("gpu and not whole_machine", {"gpu"}), ("gpu and whole_machine",
                                                                          {"gpu", "whole_machine"})):
        modules = {nodeid.split("::")[0] for nodeid, m in marks.items() if required <= set(m)}
        assert modules and gc.marked_modules(expression) == sorted(modules), expression
    assert gc.marked_modules("gpu or whole_machine") == [] == gc.marked_modules("(gpu)")  # the whole tree


def test_tests_a_session_timeout_left_unstarted_are_counted_and_said():
    """pytest's count of selected tests, from the log (xdist's items, or a plain collection's
    selected), less those that reported: a step the session timeout stopped says how many never
    started, and one that ran them all says nothing of it."""
    spread = "created: 4/4 workers\n4 workers [416 items]\n\n[gw0] [  1%] PASSED tests/gpu/test_a.py::test_x \n"
    plain = "collected 2966 items / 2942 deselected / 24 selected\n"
    assert summary_of.selected(spread) == 416 and summary_of.selected(plain) == 24
    assert summary_of.selected("collected 7 items\n") == 7 and summary_of.selected("no tests ran") is None
    cut = step(passed=364, skipped=16, returncode=2) | {"selected": 416}
    whole = step(passed=24, skipped=0) | {"selected": 24}
    assert summary_of.not_started(cut) == 36 and summary_of.not_started(whole) == 0
    summary = {"layout": "tests on 0", "commits": {}, "wall_s": 10.0, "notes": [], "ratio": None,
               "tests": {"whole_machine": whole, "gpu": cut}, "gates": {}}
    text = summary_of.lines(summary)
    assert "36 not started" in text[2] and "not started" not in text[1]


def test_certify_runs_the_working_tree_s_gate_certifying_and_the_ref_s_uncertified(faked, tmp_path):
    """`--certify leads` beside a ref of the same commit: the ratio is what certifying costs (the
    ref's gate says "off": fsr bench's own default certifies at the end)."""
    (tmp_path / "ref" / "fsr" / "commands").mkdir(parents=True)  # a ref whose fsr has the option
    (tmp_path / "ref" / "fsr" / "commands" / "run.py").write_text('group.add_argument("--certify")\n')
    code = gc.main(["run", "--out", str(tmp_path / "out"), "--gpus", "0,1,2", "--skip-tests", "--budget-s", "540",
                    "--certify", "leads"])
    assert code == 0
    gates = sorted(line for line in faked if line.startswith("gate"))
    assert gates[0].startswith("gate ref on ") and gates[0].endswith(" --certify off")
    assert gates[1].startswith("gate tree on ") and gates[1].endswith(" --certify leads")
    assert gates[0].split(" (")[0][-1] != gates[1].split(" (")[0][-1]  # side by side, a GPU each


def test_a_gate_step_passes_certify_to_fsr_bench_and_names_it(monkeypatch, tmp_path):
    seen: list[list[str]] = []

    def bounded(command, env, log, limit_s, cores=None):
        seen.append(command)
        return 0, False

    monkeypatch.setattr(gc, "run_bounded", bounded)
    got = gc.gate_step("tree", ROOT, "0", tmp_path, 300.0, ["softmax"], certify="end")
    command = seen[0]
    assert command[command.index("--") + 1:] == ["--max-wall", "300", "--certify", "end", "softmax"]
    assert got["label"] == "working tree, --certify end"
    gc.gate_step("ref", ROOT, "0", tmp_path, 300.0, [])
    assert "--certify" not in seen[1]


def test_warm_early_builds_the_tests_sets_from_the_start_in_a_folder_both_steps_share(faked, tmp_path, monkeypatch):
    """--warm-early: the warm-up starts before the whole_machine tests, niced; both test steps see
    the same contents folder and that a warm-up runs (the first worker starts none); after the
    call the folder is gone and the environment as it was."""
    from tests.support import warm_contents

    started: list[tuple[Any, int]] = []
    seen: list[tuple[str | None, str | None]] = []

    class Running:
        killed = False

        def poll(self):
            return None

        def kill(self):
            Running.killed = True

        def wait(self):
            return -9

    def start(folder, names=None, nice=0):
        started.append((folder, nice))
        return Running()

    tests_step = gc.tests_step

    def seeing(name, *args, **kwargs):
        seen.append((os.environ.get(warm_contents.FOLDER_ENV), os.environ.get(warm_contents.STARTED_ENV)))
        return tests_step(name, *args, **kwargs)

    monkeypatch.setattr(warm_contents, "start", start)
    monkeypatch.setattr(gc, "tests_step", seeing)
    code = gc.main(["run", "--out", str(tmp_path / "out"), "--gpus", "0", "--skip-gates", "--budget-s", "540",
                    "--warm-early"])
    assert code == 0 and faked == ["tests whole_machine on 0", "tests gpu on 0"]
    (folder, nice), = started
    assert nice == gc.WARM_NICE > 0 and seen == [(str(folder), "1"), (str(folder), "1")]
    assert not folder.exists() and Running.killed
    assert warm_contents.FOLDER_ENV not in os.environ and warm_contents.STARTED_ENV not in os.environ
    summary = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert any("--warm-early" in n for n in summary["notes"])
    faked.clear()
    gc.main(["run", "--out", str(tmp_path / "out2"), "--gpus", "0", "--skip-gates", "--budget-s", "540"])
    assert len(started) == 1  # without it, the session's first worker warms as before


def test_a_ref_from_before_certification_gets_no_certify_word(tmp_path):
    """Beside a certifying tree, a ref whose fsr has `--certify` runs with "off"; one from before
    the option never certifies, and its fsr bench would refuse the word."""
    assert gc.ref_uncertified(ROOT) == "off"
    old = tmp_path / "old"
    (old / "fsr" / "commands").mkdir(parents=True)
    (old / "fsr" / "commands" / "run.py").write_text('run.add_argument("--max-wall")\n')
    assert gc.ref_uncertified(old) == ""
    assert gc.ref_uncertified(tmp_path / "missing") == ""
