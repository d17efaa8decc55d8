"""The records that cross the pipe between a GPU worker's evaluator (this side) and its GPU child
(fsr.evaluate.gpu): requests, answers and the three ways a request can fail. Nothing else uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fsr.types import Candidate, Defines, Resources, Seeds, SizeCheck, TrialRecord, Verdict

TrialPrograms = tuple[tuple[Defines, bytes, tuple[tuple[str, str], ...], Resources], ...]  # defines, cubin, lowered names, report


@dataclass(frozen=True)
class EvalRequest:
    """One candidate for the GPU child: its compiled program, the tuning trials it may take
    (0: none), the tuning's starting values (empty: the candidate's own), the Optuna journal
    (None: none), the trial programs the parent compiled ahead, and the configurations not to
    run again (fsr.evaluate.configurations)."""

    candidate: Candidate
    cubin: bytes
    lowered: tuple[tuple[str, str], ...]
    tune_trials: int = 0
    start_defines: Defines = ()
    journal_path: str | None = None
    programs: TrialPrograms = ()
    failed: tuple[tuple[Defines, str], ...] = ()  # configurations that hung or crashed a child before, and how
    race_us: float | None = None  # the task's best median the worker knows: timing stops once clearly slower


@dataclass(frozen=True)
class CertifyRequest:
    """A screened candidate for certification (fsr.evaluate.gpu.certify): its program at the
    defines it was tuned to, judged again on inputs from the operating system's entropy."""

    candidate: Candidate
    cubin: bytes
    lowered: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Certified:
    """The GPU child's answer to a CertifyRequest: OK with the checks and the timing samples, or
    the verdict of what failed (WRONG, LAUNCH_ERROR, REJECTED), with `failed_check` naming the
    input set or check, and the seed of each input set it took, by the set's name
    (fsr.certification.set_inputs draws its inputs again)."""

    verdict: Verdict
    message: str = ""
    failed_check: str = ""
    checks: tuple[SizeCheck, ...] = ()
    samples_us: tuple[float, ...] = ()
    resources: Resources | None = None
    stages: Stages = field(default_factory=lambda: Stages())
    seeds: Seeds = ()
    # the same program's samples on the screening's own benchmark sets, timed right after the
    # fresh set in the same load with the same flush: the timing check's pair (fsr.certification)
    control_us: tuple[float, ...] = ()


@dataclass(frozen=True)
class Stages:
    """Wall seconds of the GPU child's stages for one candidate."""

    verify_s: float = 0.0  # checks at every test size
    tune_s: float = 0.0
    bench_s: float = 0.0  # timing, and the check after it


@dataclass(frozen=True)
class ChildResult:
    """The GPU child's answer to an EvalRequest: a verdict, the checks, the timing samples, the
    values it ran with, and the driver's report of the tuned program when tuning picked other
    values than the request's (None otherwise)."""

    verdict: Verdict
    message: str = ""
    checks: tuple[SizeCheck, ...] = ()
    samples_us: tuple[float, ...] = ()
    defines: Defines = ()
    resources: Resources | None = None
    trials: tuple[TrialRecord, ...] = ()
    stages: Stages = field(default_factory=Stages)
    cut_short: bool = False  # its timing stopped early, clearly slower than the request's race_us


@dataclass(frozen=True)
class Prepared:
    """A task loaded in the GPU child: the library's and PyTorch eager's medians at the benchmark
    size (None where the task has no such comparator or it could not run), and where the
    preparation's time went (host: inputs and float64 references; device: uploads and the
    comparators' timing), so a slow start can be told apart from slow candidates."""

    library_us: float | None
    host_s: float = 0.0
    device_s: float = 0.0
    torch_us: float | None = None
    torch_compile_us: float | None = None
    torch_compile_s: float | None = None  # compiling it, not in device_s's comparator timing
    evicted: tuple[str, ...] = ()  # tasks the child dropped to make room: prepare them again before use


@dataclass(frozen=True)
class Compared:
    """A task's comparators timed beside candidates (fsr.evaluate.gpu.beside), sent before the
    reply of the request during which they finished: the medians as in Prepared, and the seconds
    their timing held the GPU (preparation, charged to the evaluation that receives them)."""

    task: str
    library_us: float | None
    torch_us: float | None
    torch_compile_us: float | None
    torch_compile_s: float | None
    gpu_s: float
    missed: tuple[str, ...] = ()  # why a comparator is left out, one line each


@dataclass(frozen=True)
class Died:
    """The GPU child died or broke its context while handling a request."""

    reason: str


@dataclass(frozen=True)
class Faulted:
    """fsr's own code failed in the GPU child while handling a request (no context was broken:
    not the kernel's doing); the child is gone. Never a verdict on the candidate."""

    reason: str


@dataclass(frozen=True)
class TimedOut:
    """A request to the GPU child outlived its deadline; the child was killed."""

    seconds: float
    doing: str = ""  # the child's last note of what it was running ("" if none)
