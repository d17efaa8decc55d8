"""One device call that checks a change: the GPU tests, and the scale gate for the working tree and
a ref, with one summary.

    python bench/gpu_check.py prepare [--ref REF]          # here, no GPU needed
    python bench/gpu_check.py run --out DIR [--gpus 0,1] [--budget-s 540] [--skip-tests | --skip-gates]
                                  [--certify MODE] [TASK ...]

`prepare` unpacks REF's files (`git archive`) into .gpucheck/ref/, an ignored folder the device
call carries, and records both commits in .gpucheck/ref.json. REF defaults to the commit the
branch started from: `git merge-base HEAD origin/main`, else `main`, else HEAD~1 (also where the
merge base is HEAD itself, as on main).

`run`, on the GPUs of --gpus (default: every visible one): first the `whole_machine` tests, alone
on the first GPU; then the other GPU tests (pytest-xdist, `-n auto`: a few workers per GPU) on all but the last
GPU while the scale gate (bench/scale.py: the 16 float32 tasks, or the TASKs given, cold, compile
cache off) runs on the last for the working tree and the ref side by side, sharing it; with three
GPUs or more, the tests take all but the last two and the two gates run on those, one each. With
one GPU the tests come first and the gates after them, side by side on it. Every step is bounded so the whole call ends within --budget-s: the gates get `fsr bench --max-wall` for what
is left (the same for both trees), and are left out, saying so, where too little is left (then
`run --skip-tests` in a call of their own). It prints one summary and writes it to DIR/gpu_check.json
(after every step, so a call cut short leaves what it finished), with each step's log beside it.

`--certify MODE` runs the working tree's gate with `fsr bench --certify MODE`, the ref's with
`--certify off`: after `prepare --ref HEAD` both gates run one tree, and their ratio is what
certifying in MODE costs the search (on two GPUs or more, side by side on one host). Without it
both gates run as `fsr bench` defaults (a tree since 2026-11-29 certifies each task's fastest at
its end; an older ref, nothing).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_check_summary import (  # bench/ is this script's folder
    failed,
    gate_figures,
    junit_results,
    lines,
    log_results,
    ratio,
    selected,
)

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".gpucheck"  # git-ignored; carried to the device machine
WHOLE_MACHINE_S = 270.0  # the whole_machine tests' step, at most (24 tests: about 190 s on one H200)
TESTS_S = 480.0  # the other GPU tests' step, at most (about 400 s on two H200s, two workers each)
WARM_NICE = 10  # --warm-early's warm-up, beside the whole_machine tests: their processes go first
TEST_TIMEOUT_S = 300  # one test, at most (pytest-timeout)
GATE_MAX_WALL_S = 420.0  # fsr bench's own default --max-wall
GATE_OVERHEAD_S = 60.0  # a gate's start (Ray, the GPU child) and its lineage read, beyond --max-wall
MIN_GATE_S = 90.0  # below this --max-wall a cold campaign measures its start more than its throughput
TESTS = "tests"  # the folder whose test modules a step collects


@dataclass(frozen=True)
class Layout:
    """Where each part runs: the tests' GPUs, and the gates' lanes (GPU, trees run one after the
    other on it)."""

    tests: tuple[str, ...]
    lanes: tuple[tuple[str, tuple[str, ...]], ...]
    words: str


def layout(gpus: list[str], trees: tuple[str, ...] = ("tree", "ref"), tests: bool = True) -> Layout:
    """The tests on all but the last GPU (all but the last two where there are three or more), the
    gates on the rest; with one GPU everything on it, the gates after the tests. The two gates always
    run at the same time, each for the whole of its --max-wall: on a GPU each where there are two for
    them, else side by side on the one they share (alike for both trees: the same GPU, host and
    moment, where one after the other would halve each one's wall)."""
    def lanes(on: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple((on[i % len(on)], (tree,)) for i, tree in enumerate(trees))

    def where(on: list[str]) -> str:
        return (f"the gates side by side on {on[0]} and {on[1]}" if len(on) > 1 and len(trees) > 1
                else f"the gates side by side on {on[0]}, sharing it" if len(trees) > 1 else f"the gate on {on[0]}")

    if not tests:
        return Layout((), lanes(gpus[:2]), f"{where(gpus[:2])}, no tests")
    if not trees:
        return Layout(tuple(gpus), (), f"tests on {','.join(gpus)}, no gates")
    if len(gpus) == 1:
        return Layout((gpus[0],), lanes(gpus), f"one GPU ({gpus[0]}): the tests, then {where(gpus)}")
    if len(gpus) == 2 or len(trees) == 1:
        return Layout(tuple(gpus[:-1]), lanes(gpus[-1:]), f"tests on {','.join(gpus[:-1])}; {where(gpus[-1:])}, "
                      "beside the tests")
    return Layout(tuple(gpus[:-2]), lanes(gpus[-2:]), f"tests on {','.join(gpus[:-2])}; {where(gpus[-2:])}")


def gate_wall_s(left_s: float, gates: int) -> float:
    """fsr bench's --max-wall for each of `gates` gates run one after the other in `left_s`."""
    return min(GATE_MAX_WALL_S, (left_s - gates * GATE_OVERHEAD_S) / max(1, gates))


# ---- steps --------------------------------------------------------------------------------------

def core_shares(gpus: list[str], cores: list[int] | None = None) -> dict[str, list[int]]:
    """Each GPU's share of the host's cores (this process's affinity), in order: a gate and the
    tests beside it each keep to their GPUs' shares, so the tests' compiles and references do
    not take the gate's host time (a gate run beside unbound tests measured 0.57 of one run
    after them, the same tree)."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if len(cores) < len(gpus) or not gpus:
        return {gpu: cores for gpu in gpus}
    per = len(cores) // len(gpus)
    return {gpu: cores[i * per:(i + 1) * per] for i, gpu in enumerate(gpus)}


def run_bounded(command: list[str], env: dict[str, str], log: Path, limit_s: float, cwd: Path = ROOT,
                cores: list[int] | None = None) -> tuple[int, bool]:
    """Run `command` (its output to `log`, on `cores` where given) for at most `limit_s`; its exit
    status and whether it was cut (then its process group is stopped: TERM, then KILL)."""
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    with log.open("w") as sink:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=pin)
        try:
            return proc.wait(timeout=max(1.0, limit_s)), False
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
                try:
                    os.killpg(proc.pid, sig)
                    return proc.wait(timeout=grace), True
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            return -9, True


def marked_modules(marks: str, root: Path = ROOT) -> list[str]:
    """The test modules under tests/ (paths from `root`, sorted) that a pytest `-m marks` of
    markers joined by `and` can select from: those whose text marks a test with every marker the
    expression requires (`pytest.mark.gpu`, as a decorator or in `pytestmark`). A step collects
    these instead of the whole tree: collecting the CPU tests' modules too took about ten seconds
    a process (each xdist worker, and the whole_machine step again), for tests `-m` then leaves
    out. [] (collect the whole tree) for an expression with `or` or parentheses, or where no
    module matches. tests/unit/bench/test_gpu_check.py checks them against a collection."""
    terms = marks.split(" and ")
    if any(not re.fullmatch(r"(not )?\w+", t.strip()) for t in terms):
        return []
    required = [t.strip() for t in terms if not t.strip().startswith("not ")]
    patterns = [re.compile(rf"\bmark\.{re.escape(m)}\b") for m in required]
    found = [path for path in sorted((root / TESTS).rglob("test_*.py"))
             if all(p.search(path.read_text(errors="replace")) for p in patterns)]
    return [str(path.relative_to(root)) for path in found]


def tests_step(name: str, marks: str, gpus: tuple[str, ...], out: Path, limit_s: float,
               per_gpu: int | None = 1, cores: list[int] | None = None) -> dict[str, Any]:
    """The GPU tests of `marks` on `gpus` (`per_gpu` xdist workers each; None: `-n auto`, as many
    as tests/conftest.py gives each GPU for the host's cores), within `limit_s`, collected from
    the modules that mark them (`marked_modules`); the log ends with pytest's table of the slowest
    tests."""
    xml, log = out / f"tests-{name}.xml", out / f"tests-{name}.log"
    command = [sys.executable, "-m", "pytest", "-m", marks, "-v", "-p", "no:cacheprovider", "--junitxml", str(xml),
               "--durations", "40"]
    plugin = timeout_plugin()
    if plugin >= (2, 0):
        command += ["--timeout", str(TEST_TIMEOUT_S)]
    if plugin >= (2, 3):  # no test starts past it, so pytest writes its XML before the step's end
        command += ["--session-timeout", str(int(max(30.0, limit_s - 60.0)))]
    if per_gpu is None:
        command += ["-n", "auto"]
    elif len(gpus) * max(1, per_gpu) > 1:
        command += ["-n", str(len(gpus) * max(1, per_gpu))]
    command += marked_modules(marks)
    # the heavy tasks' screening sets, built at the session's start (tests/support/warm_contents.py): its log here
    env = os.environ | {"CUDA_VISIBLE_DEVICES": ",".join(gpus), "FSR_TEST_WARM_LOG": str(out / f"tests-{name}-warm.log")}
    started = time.monotonic()
    code, cut = run_bounded(command, env, log, limit_s, cores=cores)
    text = log.read_text(errors="replace") if log.is_file() else ""
    found = junit_results(xml) or log_results(text)
    return {**found, "selected": selected(text), "wall_s": time.monotonic() - started, "gpus": list(gpus), "returncode": code, "cut": cut,
            "limit_s": limit_s, "log": log.name}


def timeout_plugin() -> tuple[int, int]:
    """pytest-timeout's version ((0, 0) without it): --timeout, and --session-timeout from 2.3."""
    import importlib.metadata

    try:
        major, minor = (int(p) for p in importlib.metadata.version("pytest-timeout").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return (0, 0)
    return (major, minor)


def gate_step(tree: str, root: Path, gpu: str, out: Path, max_wall_s: float, tasks: list[str],
              cores: list[int] | None = None, certify: str = "") -> dict[str, Any]:
    """bench/scale.py (this tree's) on `root`, on one GPU, its campaign cut at `max_wall_s`, with
    `fsr bench --certify CERTIFY` where one is given."""
    label = ("working tree" if tree == "tree" else f"ref {root.name}") + (f", --certify {certify}" if certify else "")
    figures = out / f"gate-{tree}.json"
    command = [sys.executable, str(ROOT / "bench" / "scale.py"), "--gpus", gpu, "--root", str(root),
               "--out", str(out / f"gate-{tree}"), "--label", label, "--json", str(figures),
               "--", "--max-wall", str(int(max_wall_s)), *(["--certify", certify] if certify else []), *tasks]
    code, cut = run_bounded(command, dict(os.environ), out / f"gate-{tree}.log", max_wall_s + GATE_OVERHEAD_S,
                            cores=cores)
    found = gate_figures(figures) or {"label": label, "error": f"exit {code}{', cut' if cut else ''}: see its log"}
    return {**found, "gpu": gpu, "max_wall_s": max_wall_s, "cut": cut, "log": f"gate-{tree}.log"}


@dataclass
class Check:
    """One run: its budget and the summary it builds (written after every step)."""

    out: Path
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    summary: dict[str, Any] = field(default_factory=dict)
    per_gpu: int | None = None  # xdist workers per GPU for the GPU tests (None: -n auto's)
    cores: dict[str, list[int]] = field(default_factory=dict)  # each GPU's share of the host's cores
    certify: str = ""  # the working tree's gate with `--certify` this mode, the ref's with "off" (else both as defaults)
    warm_early: bool = False  # the tests' heavy sets built from the call's start (`warm_early`)

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def record(self, part: str, key: str, value: Any) -> None:
        with self.lock:
            self.summary[part][key] = value
        self.write()

    def note(self, text: str) -> None:
        with self.lock:
            self.summary["notes"].append(text)
        self.write()

    def write(self) -> None:
        with self.lock:
            self.summary["wall_s"] = time.monotonic() - self.started
            self.summary["ratio"] = ratio(self.summary)
            (self.out / "gpu_check.json").write_text(json.dumps(self.summary, indent=1) + "\n")


def gate_lane(check: Check, gpu: str, trees: tuple[str, ...], roots: dict[str, Path], tasks: list[str]) -> None:
    """The gates of `trees`, one after the other on `gpu` (`layout` gives a lane one tree: the two
    gates run at once), each cut at the same --max-wall: what is left of the budget, shared."""
    wall = gate_wall_s(check.left_s(), len(trees))
    if wall < MIN_GATE_S:
        check.note(f"gates of {', '.join(trees)} left out: {check.left_s():.0f} s of the budget left, too few; "
                   "in a call of their own: `python3 bench/gpu_check.py run --out $OUT --skip-tests`")
        return
    for tree in trees:
        certify = (check.certify if tree == "tree" else ref_uncertified(roots[tree])) if check.certify else ""
        check.record("gates", tree, gate_step(tree, roots[tree], gpu, check.out, wall, tasks, check.cores.get(gpu),
                                              certify=certify))


def ref_uncertified(root: Path) -> str:
    """The --certify a ref's gate gets beside a certifying tree: "off" where its fsr has the option
    (its default may certify), none where it predates the option (it never certifies, and its fsr
    bench would refuse the word)."""
    run = root / "fsr" / "commands" / "run.py"
    return "off" if run.is_file() and '"--certify"' in run.read_text() else ""


def warm_early(check: Check) -> Callable[[], None]:
    """--warm-early: the GPU tests' contents cache, a folder of its own outside --out, shared by
    both test steps (tests/conftest.py reads it from FOLDER_ENV), and its warm-up of the heavy
    tasks' screening sets started now, niced, beside the whole_machine tests, so the other tests'
    first worker starts none (STARTED_ENV). Returns what ends it: the warm-up stopped if still
    running, the folder removed."""
    sys.path.insert(0, str(ROOT))
    from tests.support import warm_contents

    folder = Path(tempfile.mkdtemp(prefix="fsr-gpu-check-contents-"))
    os.environ[warm_contents.FOLDER_ENV] = str(folder)
    os.environ[warm_contents.STARTED_ENV] = "1"
    os.environ[warm_contents.LOG_ENV] = str(check.out / "tests-warm-early.log")
    proc = warm_contents.start(folder, nice=WARM_NICE)
    check.note("--warm-early: the heavy screening sets built from the call's start (log: tests-warm-early.log)"
               if proc is not None else "--warm-early: the warm-up did not start (see tests-warm-early.log)")

    def end() -> None:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for name in (warm_contents.FOLDER_ENV, warm_contents.STARTED_ENV, warm_contents.LOG_ENV):
            os.environ.pop(name, None)
        shutil.rmtree(folder, ignore_errors=True)
    return end


def run(check: Check, gpus: list[str], roots: dict[str, Path], tasks: list[str], tests: bool) -> None:
    """The whole_machine tests alone; then the other tests beside the gates (after them on one GPU)."""
    plan = layout(gpus, tuple(roots), tests)
    check.summary["layout"] = plan.words
    end = warm_early(check) if tests and check.warm_early else None
    try:
        steps(check, plan, roots, tasks, tests)
    finally:
        if end is not None:
            end()


def steps(check: Check, plan: Layout, roots: dict[str, Path], tasks: list[str], tests: bool) -> None:
    """`run`'s steps in `plan`'s layout."""
    if tests:
        check.record("tests", "whole_machine", tests_step("whole_machine", "gpu and whole_machine", plan.tests[:1],
                                                          check.out, min(WHOLE_MACHINE_S, check.left_s())))
    if tests and plan.lanes and plan.lanes[0][0] in plan.tests:  # one GPU: the tests first, then the gates on it
        check.record("tests", "gpu", tests_step("gpu", "gpu and not whole_machine", plan.tests, check.out,
                                                min(TESTS_S, check.left_s()), check.per_gpu))
        tests = False
    lanes = [threading.Thread(target=gate_lane, args=(check, gpu, trees, roots, tasks)) for gpu, trees in plan.lanes]
    for lane in lanes:
        lane.start()
    if tests:  # beside the gates: on their GPUs' shares of the cores
        cores = sorted({c for gpu in plan.tests for c in check.cores.get(gpu, [])}) or None
        check.record("tests", "gpu", tests_step("gpu", "gpu and not whole_machine", plan.tests, check.out,
                                                min(TESTS_S, check.left_s() - 30), check.per_gpu, cores))
    for lane in lanes:
        lane.join()


# ---- the two modes ------------------------------------------------------------------------------

def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def default_ref(root: Path) -> tuple[str, str]:
    """The commit the branch started from, and how it was found."""
    head = git(root, "rev-parse", "HEAD")
    for base in ("origin/main", "main"):
        try:
            found = git(root, "merge-base", "HEAD", base)
        except subprocess.CalledProcessError:
            continue
        if found != head:
            return found, f"git merge-base HEAD {base}"
    return git(root, "rev-parse", "HEAD~1"), "HEAD~1 (no merge base other than HEAD)"


def prepare(ref: str | None, root: Path = ROOT) -> int:
    """REF's files into .gpucheck/ref/ (git archive), and both commits into .gpucheck/ref.json."""
    try:
        commit, how = ((git(root, "rev-parse", "--verify", f"{ref}^{{commit}}"), f"given: {ref}") if ref
                       else default_ref(root))
    except subprocess.CalledProcessError as e:
        print(f"gpu_check: no such ref: {ref or 'HEAD~1'} ({e.stderr.strip()})", file=sys.stderr)
        return 2
    state = root / STATE.name
    target = state / "ref"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=root, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    dirty = bool(git(root, "status", "--porcelain", "--untracked-files=no"))
    info: dict[str, Any] = {"ref": commit[:12], "ref_subject": git(root, "log", "-1", "--format=%s", commit), "how": how,
            "tree": git(root, "rev-parse", "--short=12", "HEAD") + (" with uncommitted changes" if dirty else "")}
    files = git(root, "ls-files").splitlines()
    info["files"], info["digest"] = files, files_digest(root, files)
    (state / "ref.json").write_text(json.dumps(info, indent=1) + "\n")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(target)], cwd=root).returncode == 0
    print(f"gpu_check: ref {info['ref']} ({how}: {info['ref_subject']}) unpacked in {target.relative_to(root)}"
          f"{'' if ignored else '; WARNING: not ignored by git, so a device call would carry it as tracked files'}")
    return 0


def files_digest(root: Path, files: list[str]) -> str:
    """One SHA-256 over `files` (paths and contents; a missing file counts as empty), so that a
    call can tell whether the tree it runs is the one `prepare` named."""
    digest = hashlib.sha256()
    for name in files:
        try:
            data = (root / name).read_bytes()
        except OSError:
            data = b""
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def tree_named(root: Path, info: dict[str, Any]) -> str | None:
    """A note where the working tree is not the one `prepare` recorded (its files changed since),
    else None."""
    files = info.get("files")
    if not isinstance(files, list) or "digest" not in info:
        return None
    if files_digest(root, files) == info["digest"]:
        return None
    return (f"the working tree is not {info.get('tree', '?')}, which `prepare` recorded: its files changed "
            "since; run `python bench/gpu_check.py prepare` again before a call")


def visible_gpus() -> list[str]:
    """The devices this process may use, as CUDA_VISIBLE_DEVICES names them."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(x for x in out.splitlines() if x.startswith("GPU "))]


def start(args: argparse.Namespace) -> int:
    gpus = [g for g in args.gpus.split(",") if g] if args.gpus else visible_gpus()
    if not gpus:
        print("gpu_check: no GPU visible (CUDA_VISIBLE_DEVICES, nvidia-smi -L); --gpus names them", file=sys.stderr)
        return 3
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, args.budget_s, per_gpu=args.workers_per_gpu, cores=core_shares(gpus), certify=args.certify,
                  warm_early=args.warm_early)
    prepared = gate_figures(STATE / "ref.json") or {}
    commits = {k: v for k, v in prepared.items() if k not in ("files", "digest")}
    check.summary = {"gpus": gpus, "layout": "", "commits": commits, "tests": {}, "gates": {}, "ratio": None,
                     "notes": [], "wall_s": 0.0, "budget_s": args.budget_s}
    if (changed := tree_named(ROOT, prepared)) is not None:
        commits["tree"] = f"{commits.get('tree', '?')}, changed since"
        check.note(changed)
    roots = {} if args.skip_gates else {"tree": ROOT}
    if not args.skip_gates and (STATE / "ref").is_dir():
        roots["ref"] = STATE / "ref"
    elif not args.skip_gates:
        check.note("no ref tree: run `python bench/gpu_check.py prepare` before the call and carry .gpucheck")
    run(check, gpus, roots, args.tasks, tests=not args.skip_tests)
    check.write()
    print("\n".join(lines(check.summary)))
    return 1 if failed(check.summary) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    prep = modes.add_parser("prepare", help="unpack the ref's files into .gpucheck/ref (no GPU needed)")
    prep.add_argument("--ref", default=None, help="a commit or branch (default: where this branch left main)")
    go = modes.add_parser("run", help="the GPU tests and the scale gate of both trees, on the device machine")
    go.add_argument("--out", required=True, help="the folder for the summary (gpu_check.json) and the logs")
    go.add_argument("--gpus", default="", help="the GPUs to use, as CUDA_VISIBLE_DEVICES names them (default: all)")
    go.add_argument("--workers-per-gpu", type=int, default=None,
                    help="pytest-xdist workers per test GPU (default: -n auto's, four where the host has 16 "
                         "cores a GPU; they share its memory)")
    go.add_argument("--budget-s", type=float, default=540.0, help="the whole call's seconds (default 540)")
    skip = go.add_mutually_exclusive_group()
    skip.add_argument("--skip-tests", action="store_true", help="the gates alone")
    skip.add_argument("--skip-gates", action="store_true", help="the tests alone")
    go.add_argument("--warm-early", action="store_true",
                    help="build the tests' heavy screening sets from the call's start, niced, beside the "
                         "whole_machine tests, not from the other tests' start")
    go.add_argument("--certify", default="", choices=("", "off", "leads", "end"), metavar="MODE",
                    help="the working tree's gate with `fsr bench --certify MODE` (off, leads, end), the ref's "
                         "with `--certify off`: after `prepare --ref HEAD` the ratio is what certifying costs")
    go.add_argument("tasks", nargs="*", help="tasks for the gate (default: bench/scale.py's 16 float32 tasks)")
    args = parser.parse_args(argv)
    return prepare(args.ref) if args.mode == "prepare" else start(args)


if __name__ == "__main__":
    sys.exit(main())
