"""`fsr run`: a search campaign over one or more tasks on every GPU Ray can see.

Embedded default: a local Ray with every local GPU; `--address` joins an existing cluster;
`--local` runs one GPU in this process's child, without Ray (for debugging). The lineage goes to
runs/<run_id>/, and `--resume runs/<run_id>` carries a stopped campaign on from it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fsr import config as cfg_mod
from fsr import lineage, run_json, tasks
from fsr.commands import EXIT_NO_DEVICE, EXIT_OK, UsageError, at_least, config_option, non_empty
from fsr.evaluate import START_TIMEOUT_S
from fsr.execute.base import Executor, WorkerStats
from fsr.propose.base import Proposer, has_baseline, speedup_basis, speedup_words
from fsr.types import Task

DEPTH = 8  # rounds of the fsr strategy


def add_where_arguments(parser: argparse.ArgumentParser) -> Any:
    """The options that say where a campaign runs (shared by `fsr run` and `fsr bench`)."""
    where = parser.add_argument_group("where it runs")
    where.add_argument("--address", help="join this Ray cluster ('auto', host:port or ray://host:port)")
    where.add_argument("--gpus", type=at_least(1), help="GPUs the embedded Ray uses (default: all local GPUs)")
    where.add_argument("--local", action="store_true", help="one local GPU, no Ray")
    where.add_argument("--runs-dir", type=non_empty("a folder"), default="runs", help="where run directories go (default: runs/)")
    return where


def add_search_arguments(group: Any) -> None:
    """Islands, seed, tuning trials, the hang timeout, certification and the comparators' wait
    (shared by `fsr run` and `fsr bench`)."""
    group.add_argument("--islands", type=config_option("search", "islands"), help="islands per task")
    group.add_argument("--seed", type=config_option("search", "seed"))
    group.add_argument("--tune-trials", type=config_option("tune", "trials"),
                       help="launch-parameter trials per candidate (0: off)")
    group.add_argument("--timeout", type=config_option("eval", "timeout_s"),
                       help="seconds before a running kernel counts as hung")
    group.add_argument("--certify", type=config_option("eval", "certify"), metavar="MODE",
                       help='eval.certify: "off", "leads" or "end" (true = "end"; docs/judge.md, "Two tiers")')
    group.add_argument("--comparators-wait", type=config_option("search", "comparators_wait_s"),
                       help="seconds a campaign that ends by itself waits at most for the comparators "
                            "(library, PyTorch) not yet timed, before its table (0: none)")


def add_model_arguments(parser: argparse.ArgumentParser) -> Any:
    """The model's name, endpoint and money ceiling (shared by `fsr run` and `fsr bench`)."""
    model = parser.add_argument_group("language model (default: the offline mutator)")
    model.add_argument("--model", type=non_empty("a model name"), help="model name at an OpenAI-compatible endpoint")
    model.add_argument("--base-url", type=config_option("llm", "base_url"),
                       help="endpoint, e.g. http://localhost:8000/v1 (default: OpenAI's)")
    model.add_argument("--max-cost", type=config_option("llm", "max_cost"),
                       help="USD the model may cost this run (only with a model)")
    return model


def add_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="search for fast kernels for one or more tasks")
    run.add_argument("tasks", nargs="*", help="task names or task directories (default with --resume: the run's)")
    where = add_where_arguments(run)
    where.add_argument("--resume", type=non_empty("a run directory"), metavar="RUN_DIR", help="carry on a stopped run from its lineage")
    budget = run.add_argument_group("budget and search")
    budget.add_argument("--max-evaluations", type=config_option("search", "max_evaluations"),
                        help="evaluations per task")
    budget.add_argument("--max-wall", type=config_option("search", "max_wall_s"),
                        help="seconds the search starts evaluations for; those in flight then finish, and any "
                             "certifications follow")
    budget.add_argument("--target-speedup", type=config_option("search", "target_speedup"),
                        help="stop a task once its best beats the baseline by this")
    add_search_arguments(budget)
    model = add_model_arguments(run)
    model.add_argument("--strategy", choices=("islands", "fsr"), default="islands",
                       help="islands (fsr's search) or fsr (the paper's loop, for comparison)")
    model.add_argument("--depth", type=at_least(1), help=f"rounds of the fsr strategy (default {DEPTH}; "
                                                         "only with --strategy fsr)")
    model.add_argument("--replay", type=non_empty("a run directory"), metavar="RUN_DIR", help="serve model replies from that run's cache")
    run.add_argument("--plain", action="store_true", help="one progress line every few evaluations, no live view")


def run_command(args: argparse.Namespace) -> int:
    return run_campaign_args(args)[0]


def run_campaign_args(args: argparse.Namespace) -> tuple[int, Path]:
    """`fsr run`'s work from parsed arguments (also `fsr bench`'s): (exit code, run directory)."""
    run_dir, config, task_list = _setup(args)
    fresh = [] if args.resume else [d for d in (run_dir, *run_dir.parents) if not d.exists()]
    try:
        proposer = _proposer(args, config, run_dir)
        task_list = startable(task_list, proposer)
        executor = _executor(args, config, run_dir, task_list)
    except BaseException:
        _discard_unstarted(run_dir, fresh)
        raise
    if executor is None:
        _discard_unstarted(run_dir, fresh)
        return EXIT_NO_DEVICE, run_dir
    from fsr.execute.local import EvaluatorUnavailable

    try:
        if args.local:
            executor.workers(START_TIMEOUT_S)  # the GPU child is up (or EvaluatorUnavailable) before anything is written
        if fresh:
            _write_run_json(args, config, task_list, run_dir)
        print(f"fsr: run {run_dir.name}: {', '.join(t.name for t in task_list)}; lineage in {run_dir}/",
              file=sys.stderr)
        with lineage.LineageWriter(run_dir) as writer:
            summary = _search(args, config, task_list, executor, proposer, writer, run_dir)
        run_json.record_devices(run_dir, executor.workers().devices)  # as the workers measured them
    except EvaluatorUnavailable as e:  # also every Ray worker lost: what was evaluated is kept
        resume = "" if _discard_unstarted(run_dir, fresh) else f"; carry the campaign on with: fsr run --resume {run_dir}"
        print(f"fsr: {e}{resume}", file=sys.stderr)
        return EXIT_NO_DEVICE, run_dir
    finally:
        executor.close()
    _export_best(run_dir)
    print(summary, file=sys.stderr)
    return EXIT_OK, run_dir


def _setup(args: argparse.Namespace) -> tuple[Path, cfg_mod.Config, list[Task]]:
    """Config, run directory (not created yet) and tasks, all checked; raises on bad input."""
    if args.resume:
        run_dir, config, names = _resumed(args)
    else:
        config = cfg_mod.load(args.config, _overrides(args))
        _check_runs_dir(args.runs_dir)
        run_dir = Path(args.runs_dir) / lineage.new_run_id()
        names = args.tasks
    if not names:
        raise UsageError("name at least one task (fsr tasks lists them)")
    check_options(args, config)
    return run_dir, config, [tasks.load(n, args.tasks_dir) for n in names]


def check_options(args: argparse.Namespace, config: cfg_mod.Config) -> None:
    """Options that contradict each other, or that nothing would read: UsageError, since each
    changes what runs or what the user believes runs."""
    if args.local and (args.address or args.gpus):
        raise UsageError(f"--local runs one GPU without Ray: it takes no {'--address' if args.address else '--gpus'}")
    if getattr(args, "depth", None) is not None and getattr(args, "strategy", "fsr") != "fsr":
        raise UsageError("--depth sets the rounds of --strategy fsr; the islands search has no depth "
                         "(its budget is --max-evaluations)")
    if args.max_cost is not None and not _uses_model(args, config):
        raise UsageError("--max-cost bounds a model's spending, and no model is set (--model or [llm] model)")


def startable(task_list: list[Task], proposer: Proposer) -> list[Task]:
    """The tasks a search can start: islands start from the task's baseline kernel (or its
    template), else from a first kernel the proposer writes. A task without baseline.cu (one made
    by `fsr import`) under a proposer that cannot write one (the offline mutator) is left out
    with one line, and the campaign goes on with the others; with none left, that is bad input."""
    ready = [t for t in task_list if has_baseline(t) or t.template_source or proposer.describe(t).writes_first_kernel]
    why = ("no baseline.cu and no model: the offline proposer needs a kernel to start from; "
           "configure a model (docs/models.md) or add baseline.cu")
    if not ready:
        raise UsageError(f"{', '.join(t.name for t in task_list)}: {why}")
    for t in task_list:
        if t not in ready:
            print(f"fsr: {t.name}: {why}; left out, the other tasks go on", file=sys.stderr)
    return ready


def _resumed(args: argparse.Namespace) -> tuple[Path, cfg_mod.Config, list[str]]:
    """A stopped run's directory, its recorded config with the command line's options on top, and
    its tasks (or the ones named); raises UsageError, in one line, for anything but an fsr run."""
    run_dir = Path(args.resume)
    if not run_dir.is_dir():
        raise UsageError(f"--resume {args.resume}: no such directory")
    if not (run_dir / "run.json").is_file():
        raise UsageError(f"--resume {args.resume}: not an fsr run directory (no run.json)")
    recorded = run_json.read_run_json(run_dir)  # LineageError if damaged
    if not recorded.get("tasks"):  # fsr writes its tasks there before the first evaluation
        raise UsageError(f"--resume {args.resume}: not an fsr run directory (its run.json names no tasks)")
    try:
        cfg_mod.from_dict(recorded.get("config", {}))
    except cfg_mod.ConfigError as e:
        raise UsageError(f"{run_dir / 'run.json'}: {e}") from None
    if args.config:
        raise UsageError("--config with --resume: a resumed run keeps the config in its run.json "
                         "(options such as --max-evaluations still apply)")
    config = cfg_mod.from_dict(_merged(recorded.get("config", {}), _overrides(args)))
    if not isinstance(recorded["tasks"], list) or not all(isinstance(n, str) for n in recorded["tasks"]):
        raise UsageError(f"{run_dir / 'run.json'}: 'tasks' is not a list of task names")
    others = [n for n in args.tasks if n not in recorded["tasks"]]
    if others:
        raise UsageError(f"--resume {args.resume}: {', '.join(others)} is not a task of that run "
                         f"({', '.join(recorded['tasks'])}); start a new run for it")
    return run_dir, config, args.tasks or recorded["tasks"]


def _merged(sections: dict[str, Any], overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A recorded config with the command line's options on top (a resumed run's new budget)."""
    return {name: {**sections.get(name, {}), **overrides.get(name, {})} for name in {*sections, *overrides}}


def _check_runs_dir(runs_dir: str) -> None:
    """A run directory can be made under `runs_dir` (tried with a probe that is removed at once)."""
    path = Path(runs_dir)
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fsr-probe-", dir=existing))
    except OSError as e:
        raise UsageError(f"--runs-dir {runs_dir}: cannot make a run directory there ({e.strerror})") from None


def _write_run_json(args: argparse.Namespace, config: cfg_mod.Config, task_list: list[Task], run_dir: Path) -> None:
    """Written once the run can start (config, tasks, proposer and GPU workers all ready)."""
    run_json.write_run_json(run_dir, cfg_mod.to_dict(config),
                           {"command": shlex.join(["fsr", *sys.argv[1:]]), "tasks": [t.name for t in task_list],
                            "libraries": {t.name: t.library for t in task_list if t.library},
                            "strategy": args.strategy})


def _discard_unstarted(run_dir: Path, fresh: list[Path]) -> bool:
    """Remove a new run's directory, and the parents made for it (`fresh`), if nothing was
    evaluated: a run that could not start leaves nothing behind (not even an llm_cache or a
    cluster log made on the way). True if removed."""
    if not fresh or (run_dir.exists() and lineage.read(run_dir).num_rows):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in fresh[1:]:
        with contextlib.suppress(OSError):  # not empty: another run started there meanwhile
            parent.rmdir()
    return True


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    picks = {
        "search": {"max_evaluations": args.max_evaluations, "max_wall_s": args.max_wall,
                   "target_speedup": args.target_speedup, "islands": args.islands, "seed": args.seed,
                   "comparators_wait_s": args.comparators_wait},
        "tune": {"trials": args.tune_trials},
        "eval": {"timeout_s": args.timeout, "certify": args.certify},
        "llm": {"model": args.model, "base_url": args.base_url, "max_cost": args.max_cost},
    }
    return {section: {k: v for k, v in values.items() if v is not None} for section, values in picks.items()}


def _uses_model(args: argparse.Namespace, config: cfg_mod.Config) -> bool:
    """A language model proposes (live or replayed), rather than the offline mutator."""
    return bool(config.llm.model or args.replay)


def _proposer(args: argparse.Namespace, config: cfg_mod.Config, run_dir: Path) -> Proposer:
    if not _uses_model(args, config):
        from fsr.propose.mutate import MutateProposer

        return MutateProposer()
    from fsr.propose.llm import make_llm_proposer

    try:
        proposer = make_llm_proposer(config.llm, run_dir, replay=args.replay)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not args.replay:
        _check_endpoint(config.llm)
    return proposer


def _check_endpoint(llm: cfg_mod.LLMConfig) -> None:
    """Reach the endpoint before the run starts: a server that cannot be reached, or that refuses
    the key, is bad input."""
    from fsr.propose.endpoint import EndpointError, check_endpoint

    try:
        check_endpoint(llm)
    except EndpointError as e:
        raise UsageError(str(e)) from None


def _executor(args: argparse.Namespace, config: cfg_mod.Config, run_dir: Path, task_list: list[Task]) -> Executor | None:
    """The executor; every worker starts preparing the campaign's tasks at once. The tasks go to
    the workers as the driver loaded them, in one spec."""
    from fsr.types import WorkerSpec

    spec = WorkerSpec.of(config, task_list, journal_dir=str(run_dir.resolve()), warm=True)
    if args.local:
        from fsr.evaluate.evaluator import GpuEvaluator
        from fsr.execute.local import LocalExecutor

        # comparators timed beside the first candidates: a campaign does not wait for them
        return LocalExecutor(lambda: GpuEvaluator(spec, beside=True, campaign=True), max_in_flight=2)  # the next one queued
    if not args.address:
        from fsr.commands.launch import device_problem

        problem = device_problem()  # the embedded Ray would take seconds to find no GPU
        if problem is not None:
            print(f"fsr: a search needs a CUDA device; {problem}", file=sys.stderr)
            return None
    from cluster.executor import NoWorkerError, RayExecutor
    from cluster.start import ClusterError, connect

    try:
        connect(args.address, args.gpus, ray_log=run_dir / "cluster.log", secrets=(config.llm.api_key_env,))
        return RayExecutor.from_config(spec)
    except ClusterError as e:
        raise UsageError(str(e)) from None
    except NoWorkerError as e:
        print(f"fsr: {e}", file=sys.stderr)
        return None


def _fsr_strategy(args: argparse.Namespace, config: cfg_mod.Config, task_list: list[Task], executor: Executor,
                  proposer: Proposer, writer: lineage.LineageWriter, run_dir: Path) -> str:
    """The paper's loop, task after task; its totals go to run.json as the island search's do."""
    from fsr.search.fsr_strategy import run_fsr

    lines, started, reasons, stops = [], time.perf_counter(), set(), {}
    for task in task_list:
        s = run_fsr(task, executor, proposer, config.search, writer, args.depth or DEPTH,
                    config.llm.candidates_per_request, certify=config.eval.certify)
        best = f"{s.best.latency_us:.1f} us" if s.best and s.best.ok else "none correct"
        lines.append(f"{task.name}: best {best} after {s.evaluations} evaluations, stopped by {s.stopped_by}")
        reasons.add(s.stopped_by)
        stops[task.name] = {"evaluations": s.evaluations, "note": f"stopped by {s.stopped_by}"}
    run_json.record_campaign(run_dir, {"evaluations": sum(v["evaluations"] for v in stops.values()),
                                      "wall_s": round(time.perf_counter() - started, 3),
                                      "stopped_by": ", ".join(sorted(reasons)), "tasks": stops})
    return "\n".join(lines)


def _search(args: argparse.Namespace, config: cfg_mod.Config, task_list: list[Task], executor: Executor,
            proposer: Proposer, writer: lineage.LineageWriter, run_dir: Path) -> str:
    if args.strategy == "fsr":
        return _fsr_strategy(args, config, task_list, executor, proposer, writer, run_dir)
    from fsr.search.loop import run_campaign
    from fsr.search.pace import Ceilings
    from fsr.view import make_view

    view = make_view(live=False if args.plain else None)
    llm = config.llm
    pace = Ceilings(llm.concurrency, llm.max_requests_per_minute, llm.max_tokens_per_minute) \
        if _uses_model(args, config) else None
    summary = run_campaign(task_list, executor, proposer, config.search, writer, view,
                           resume=run_dir if args.resume else None, pace=pace,
                           candidates_per_request=config.llm.candidates_per_request, certify=config.eval.certify)
    waited = summary.comparators
    if waited is not None:  # the comparators timed after the last evaluation: no lineage row carries them
        run_json.record_comparators(run_dir, waited.answers)
    run_json.record_campaign(run_dir, {"evaluations": summary.evaluations, "wall_s": round(summary.wall_s, 3),
                                      "driver_ms_per_evaluation": round(summary.driver_ms_per_evaluation, 3),
                                      "stopped_by": summary.stopped_by,
                                      # why a task stopped short of its budget: the report says it
                                      "tasks": {t.task: {"evaluations": t.finished, "note": t.note} for t in summary.tasks},
                                      **({"comparators": waited.record()} if waited is not None else {})})
    bases = {t.name: speedup_basis(t) for t in task_list}
    lines = [f"{t.task}: best {t.best_us:.1f} us, {speedup_words(t.best_speedup, bases[t.task])} ({t.finished} evaluations)"
             if t.best_us else f"{t.task}: no {'certified' if t.uncertified else 'correct'} kernel ({t.finished} evaluations)"
             for t in summary.tasks]
    lines.append(f"{summary.evaluations} evaluations in {summary.wall_s:.0f} s, stopped by {summary.stopped_by}; "
                 f"driver {summary.driver_ms_per_evaluation:.2f} ms per evaluation")
    if waited is not None and waited.text():
        lines.append(waited.text())
    lines += _worker_lines(executor.workers().stats)
    return "\n".join(lines)


def _worker_lines(stats: Sequence[WorkerStats]) -> list[str]:
    """One line per GPU worker: where it ran, what it did, and where its time went once ready
    (evaluating candidates, preparing: starting its GPU child and preparing tasks, idle)."""
    lines = []
    for w in stats:
        evaluating, preparing, idle = w.shares()
        busy = f"evaluating {evaluating:.0%}, preparing {preparing:.0%}, idle {idle:.0%} of {w.alive_s:.0f} s" \
            if w.alive_s > 0 else "never ready"
        faults = f", lost {w.lost} time{'s' * (w.lost != 1)} ({w.requeued} evaluations re-queued)" if w.lost else ""
        if w.crashes or w.timeouts or w.restarts:
            faults += f", {w.crashes} crashed, {w.timeouts} timed out, {w.restarts} restarts"
        lines.append(f"  worker {w.name} ({w.device or 'no device'}): {w.evaluations} evaluations, {busy}{faults}")
    return lines


def _export_best(run_dir: Path) -> None:
    """runs/<id>/best/<task>.cu: each task's fastest correct kernel (certified, where the campaign
    certifies), its tuned values as defaults."""
    from fsr import certification
    from fsr.candidate import export

    table = lineage.read(run_dir)
    if table.num_rows == 0:
        return
    every = table.to_pylist()
    passed = certification.certified_ids(every) if certification.certifying(run_json.read_run_json(run_dir)) else None
    rows = [r for r in certification.screenings(every) if r["verdict"] == "OK" and r["median_us"] is not None
            and (passed is None or r["candidate_id"] in passed)]
    best: dict[str, dict] = {}
    for r in rows:
        if r["task"] not in best or r["median_us"] < best[r["task"]]["median_us"]:
            best[r["task"]] = r
    out = run_dir / "best"
    out.mkdir(exist_ok=True)
    for task_name, row in best.items():
        cand = lineage.candidate_from_row(row)
        tuned = tuple((d["name"], d["value"]) for d in row.get("tuned_defines") or [])
        (out / f"{task_name}.cu").write_text(export(cand, tuned or cand.resolved_defines()))
