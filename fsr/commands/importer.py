"""`fsr import FILE_OR_DIR... [--out TASKS_DIR] [--max-bench-bytes BYTES] [--dtype DTYPE]`: KernelBench-format
problem files as task folders, benchmarked at the files' sizes or at smaller ones that fit a GPU worker,
in float32 (the files' own dtype) or cast to float16 / bfloat16 as KernelBench v0.2 casts them.

Each file is imported in a child process (fsr.kernelbench.one) under a time bound: a file that
hangs or exhausts memory is skipped with that reason and a fresh child takes the next file. One
line per file (imported, or skipped and why), then the counts.

Exit codes: 0 every file imported; 1 a file was skipped (the others are written); 2 bad input
(a path, an option, no --out), no file imported (nothing importable was given: one file's
reason, or a line per file, then the error), or an importing process that cannot start (torch
missing: one line says how to get it). A task folder appears in --out only once its file is
imported (the child writes it into a staging folder), and --out only with the first one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

import fsr
from fsr.commands import EXIT_OK, EXIT_VERDICT, UsageError, at_least, non_empty
from fsr.files import input_problem
from fsr.kernelbench import DEFAULT_MAX_BENCH_BYTES

START_S = 120  # a child's torch import on a loaded machine
TORCH_HINT = "pip install torch --index-url https://download.pytorch.org/whl/cpu (the CPU build is enough)"
EXIT_WAIT_S = 5.0  # after its stdout ends, how long an importing process may take to exit
STDERR_TAIL = 300  # characters of a dead child's stderr quoted in its line


def add_parser(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser("import", help="turn KernelBench-format problem files into task folders")
    imp.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="problem files, or folders of them")
    imp.add_argument("--out", type=non_empty("a folder"), metavar="TASKS_DIR", help="where the task folders go, created with the first one "
                                                       "(default: --tasks-dir; one of them is needed)")
    imp.add_argument("--timeout", type=at_least(1), default=300, help="seconds one file may take (default 300)")
    imp.add_argument("--jobs", type=at_least(1), default=1, help="files imported at once (default 1)")
    imp.add_argument("--max-bench-bytes", type=byte_count, default=DEFAULT_MAX_BENCH_BYTES, metavar="BYTES",
                     help="the most bytes of arguments a benchmark size may hold: a file whose own sizes hold more is "
                          "benchmarked at smaller ones that fit (default 4GiB; 0: the file's sizes whatever they hold)")
    imp.add_argument("--dtype", type=import_dtype, default="float32", metavar="DTYPE",
                     help="the tasks' floating arguments: float32 (default: the files' own), float16 or bfloat16 "
                          "(the module, its weights and inputs cast as KernelBench v0.2 casts them; that dtype's tolerance)")


DTYPES = ("float32", "float16", "bfloat16")  # fsr.kernelbench.precision.CHOICES, without importing NumPy


def import_dtype(text: str) -> str:
    """An argparse `type=` for --dtype."""
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DTYPES)}, not {text!r}")
    return text


UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
         "g": 10**9, "gb": 10**9, "gib": 2**30}


def byte_count(text: str) -> int:
    """An argparse `type=` for a byte count: 4294967296, 4GiB, 512 MiB, 1.5GB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*", text)
    if match is None or match.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"expected a byte count such as 4GiB, 512MiB or 1000000, not {text!r}")
    value = float(match.group(1)) * UNITS[match.group(2).lower()]
    if value != int(value):  # 0.5 would round to 0, which means no bound at all
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, not {text!r}")
    return int(value)


def problem_files(paths: list[str]) -> list[Path]:
    """The .py files named or inside the folders named, in natural order; raises UsageError for
    a path that is neither a folder nor a file fsr reads (missing, a device, a FIFO, too large). A
    folder's files are read by the importing process, which skips one that is no text file."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = sorted(path.glob("*.py"), key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
            if not found:
                raise UsageError(f"{path} holds no .py files")
            files += found
            continue
        problem = input_problem(path)
        if problem:
            raise UsageError(f"{path}: {'no such file or folder' if problem == 'no such file' else problem}")
        files.append(path)
    return files


class Child:
    """One importing process; `run` imports a file within a time bound, replacing a hung child."""

    def __init__(self, out: Path, max_bench_bytes: int, dtype: str = "float32") -> None:
        self.out = out
        self.max_bench_bytes = max_bench_bytes
        self.dtype = dtype
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: IO[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        self.stderr = tempfile.TemporaryFile("w+")  # read back when the child dies: its last words
        proc = subprocess.Popen(child_command(self.out, self.max_bench_bytes) + self._dtype(), env=child_env(), text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        if self._line(proc, START_S) != "ready":
            self._stop(proc)
            raise UsageError(f"the importing process did not start{self._last_words(': ')}")
        return proc

    def _dtype(self) -> list[str]:
        """The importing process's last argument: the dtype, where it is not float32 (its default)."""
        return [] if self.dtype == "float32" else [self.dtype]

    def _last_words(self, lead: str) -> str:
        """The end of the child's stderr on one line, after `lead`; "" if it said nothing."""
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        text = " ".join(self.stderr.read().split())
        return lead + ("..." + text[-STDERR_TAIL:] if len(text) > STDERR_TAIL else text) if text else ""

    def run(self, path: Path, staging: Path, timeout_s: float) -> dict[str, object]:
        """The child's answer for `path` (its task staged in `staging`), or why it has none in time."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"path": str(path.resolve()), "staging": str(staging)}) + "\n")
        self.proc.stdin.flush()
        line = self._line(self.proc, timeout_s)
        if line is None:
            try:  # its stdout closed as it died, a moment before its exit status is there to read
                code: int | None = self.proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:  # still running: past its time
                code = None
            self._stop(self.proc)
            self.proc = None
            why = (f"took longer than {timeout_s:g} s" if code is None
                   else f"the importing process died (exit code {code}){self._last_words(': ')}")
            return {"ok": False, "reason": why}
        return dict(json.loads(line))

    @staticmethod
    def _line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
        reader.start()
        reader.join(timeout_s)
        return got[0].strip() or None if got else None

    @staticmethod
    def _stop(proc: subprocess.Popen[str]) -> None:
        proc.kill()
        proc.wait()

    def close(self) -> None:
        if self.proc is not None:
            self._stop(self.proc)
        if self.stderr is not None:
            self.stderr.close()


def child_command(out: Path, max_bench_bytes: int) -> list[str]:
    """The importing process: -P keeps the working directory off sys.path, so a folder named fsr
    there (a clone's, from its parent folder) is not the fsr it imports."""
    return [sys.executable, "-P", "-m", "fsr.kernelbench.one", str(out), str(max_bench_bytes)]


def child_env() -> dict[str, str]:
    """This process's environment with the folder holding this fsr first on PYTHONPATH: the child
    imports the same fsr, however this one was found (installed, editable, or a checkout)."""
    root = str(Path(fsr.__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + rest if rest else "")}


def output_dir(args: argparse.Namespace) -> Path:
    """Where the task folders go: --out, else --tasks-dir; without either, bad input (a checkout's
    or an installed fsr's own tasks/ is no place for them). Checked, not created: the first task
    imported creates it (write.place). Raises UsageError if it cannot be a folder fsr writes in."""
    if not (args.out or args.tasks_dir):
        raise UsageError("pass --out DIR, the folder the task folders go to (fsr --tasks-dir DIR tasks "
                         "then lists what was imported)")
    flag, out = ("--out", Path(args.out)) if args.out else ("--tasks-dir", Path(args.tasks_dir))
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {out} is a file, not a folder")
    existing = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"cannot create {flag} {out}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write in {flag} {out}: permission denied")
    return out


def import_command(args: argparse.Namespace) -> int:
    files = problem_files(args.paths)
    out = output_dir(args)
    if importlib.util.find_spec("torch") is None:
        raise UsageError(f"fsr import needs torch, which is not installed: {TORCH_HINT}")
    results: dict[int, dict[str, object]] = {}
    queue = list(enumerate(files))
    lock = threading.Lock()
    failures: list[Exception] = []  # a child that cannot start: raised here, not in its thread

    def work() -> None:
        child = Child(out, args.max_bench_bytes, args.dtype)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    i, path = queue.pop(0)
                with tempfile.TemporaryDirectory(prefix="fsr-import-") as staging:  # gone whatever happens
                    result = child.run(path, Path(staging), args.timeout)
                    with lock:
                        results[i] = placed(result, out)
                        if results[i].get("ok") or len(files) > 1:  # one file not imported: the error says why
                            _print(path, results[i])
        except UsageError as e:
            with lock:
                failures.append(e)
                queue.clear()
        finally:
            child.close()

    threads = [threading.Thread(target=work) for _ in range(min(args.jobs, len(files)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return outcome(files, results, out)


def placed(result: dict[str, object], out: Path) -> dict[str, object]:
    """The child's answer, its staged task moved into `out` if it imported the file."""
    from fsr.kernelbench import write
    from fsr.kernelbench.probe import ProblemError

    if not result.get("ok"):
        return result
    try:
        write.place(Path(str(result["staged"])), out)
    except ProblemError as e:
        return {**result, "ok": False, "reason": str(e)}
    except OSError as e:
        return {**result, "ok": False, "reason": f"cannot write in {out}: {e.strerror or e}"}
    return result


def outcome(files: list[Path], results: dict[int, dict[str, object]], out: Path) -> int:
    """The counts and the exit code: 0 every file imported, 1 some (a partial import), and bad
    input (UsageError, exit 2) where none was: nothing importable was given, nothing written."""
    imported = sum(1 for r in results.values() if r.get("ok"))
    if not imported:
        if len(files) == 1:
            raise UsageError(f"{files[0]}: {results[0]['reason']}")
        raise UsageError(f"none of the {len(files)} files was imported (each line above says why); nothing written")
    print(f"imported {imported}, skipped {len(files) - imported} (into {out})")
    return EXIT_OK if imported == len(files) else EXIT_VERDICT


def _print(path: Path, result: dict[str, object]) -> None:
    from fsr.kernelbench.write import task_name

    print(result_line(path, task_name(path), result), flush=True)


def result_line(path: Path, name: str, result: dict[str, object]) -> str:
    """What the command says of one file: imported (with a scaled benchmark size, the
    tolerance's note, if any, and the stress sets declared and left out), or skipped and why."""
    if not result.get("ok"):
        return f"skipped {path}: {result['reason']}"
    scaled = f", {result['scaled']}" if result.get("scaled") else ""
    note = f"; {result['note']}" if result.get("note") else ""
    stress = f"; {result['stress']}" if result.get("stress") else ""
    tolerance = result.get("tolerance") or f"atol {result['atol']}"
    return f"imported {name}: {result['tests']} test sizes, {tolerance}{scaled}{note}{stress}"
