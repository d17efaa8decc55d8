"""Frozen records: the only things that cross a process or Ray boundary (with the config tree,
fsr.config): the driver's, a GPU worker's and its GPU child's.

Sizes are tuples of (name, value) pairs rather than dicts so that records stay hashable;
`as_dict` turns one back into a mapping where code needs lookups.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from fsr.config import Config, EvalConfig, TuneConfig

Size = tuple[tuple[str, int], ...]
Defines = tuple[tuple[str, int], ...]
Seeds = tuple[tuple[str, int], ...]  # (input set's name, seed): what rebuilds a certification's inputs


def as_dict(pairs: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """A size or define tuple as a dict."""
    return dict(pairs)


def size_label(size: Size) -> str:
    """`rows=7,cols=33`: how a size is shown to people and in the lineage."""
    return ",".join(f"{k}={v}" for k, v in size)


def bytes_text(n_bytes: int) -> str:
    """4 GiB, 300 MiB, 1.5 GiB: a memory bound as a person would write it (exact where it is a
    whole number of a unit; bytes below 1 KiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            whole, rest = divmod(n_bytes, scale)
            return f"{whole} {unit}" if rest == 0 else f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes} bytes"


class Verdict(enum.StrEnum):
    """What happened to a candidate. Only OK carries a timing that may be ranked."""

    OK = "OK"
    COMPILE_ERROR = "COMPILE_ERROR"
    REJECTED = "REJECTED"  # a static guard or a malformed header refused it before any GPU work
    LAUNCH_ERROR = "LAUNCH_ERROR"  # the driver refused the launch (bad config, too much smem)
    WRONG = "WRONG"
    CRASH = "CRASH"  # the CUDA context died (illegal address, trap): the child was replaced
    TIMEOUT = "TIMEOUT"  # still running past its deadline: the child was killed and replaced
    SUSPECT = "SUSPECT"  # faster than the device's measured ceiling allows
    # screened OK, then failed its certification: wrong on inputs drawn from the OS's entropy, wrong
    # in a timed run there, crashed or hung there, or timed clearly slower than it was screened
    UNCERTIFIED = "UNCERTIFIED"


class Tier(enum.StrEnum):
    """Which judgement an evaluation is: screening (every candidate, fsr's fixed-seed inputs) or
    certification (a screened result that would count, re-judged on inputs nothing can predict)."""

    SCREEN = "screen"
    CERTIFY = "certify"


@dataclass(frozen=True)
class Arg:
    """One device buffer of a task: dtype and shape as expressions of the size variables."""

    name: str
    dtype: str  # numpy dtype name, e.g. "float32"
    shape: tuple[str, ...]
    intent: str  # "in" (must not be written) or "out"


@dataclass(frozen=True)
class Stress:
    """A stress set a task declares (task.toml `[[stress]]`): inputs drawn as for the tests at
    `size`, then the floating-point inputs named in `args` mapped to x * scale + offset, checked
    against the float64 reference within the set's own tolerance when a result is certified
    (docs/judge.md, "Stress sets"). Large logits, rows far from zero, tiny values: the domain a
    task's usual inputs leave out, where a kernel that drops a step (the row maximum, a second
    pass over the row) goes wrong."""

    name: str
    size: Size
    args: tuple[str, ...]
    scale: float = 1.0
    offset: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    floor: float = 0.0


@dataclass(frozen=True)
class Task:
    """A problem: its signature, sizes, tolerances, roofline expressions and baseline kernel.

    The reference, the input generator and the library comparator are Python functions in
    reference.py, carried here as its text (`reference_source`) and loaded from that text by
    `fsr.tasks.functions` in whichever process needs them: a task travels as data, so a task
    folder changed on disk mid-campaign changes nothing a worker uses. `directory` only names
    the files in messages.
    """

    name: str
    description: str
    directory: str
    size_names: tuple[str, ...]
    args: tuple[Arg, ...]
    constants: tuple[tuple[str, float], ...]  # passed to kernels as float32 scalars
    test_sizes: tuple[Size, ...]
    bench_size: Size
    atol: float
    rtol: float
    bytes_expr: str  # fewest bytes the problem must move, as an expression of the sizes
    flops_expr: str
    baseline_source: str
    template_source: str | None
    reference_source: str  # reference.py's text (trusted: written by people, never by a proposer)
    has_library: bool
    content_hash: str  # of the folder's files as read, and of a template named from another task (its text, its defines)
    floor: float = 0.0  # magnitude floor, a fraction of an output's mean |ref| (fsr.dtypes.bounds)
    stress: tuple[Stress, ...] = ()  # checked when a result is certified
    template_where: str = ""  # the file template_source is read from, and a variant's defines (messages)
    library: str = ""  # what the library comparator is, as tables name it (task.toml `library`; "" unnamed)

    @property
    def inputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.intent == "in")

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.intent == "out")

    @property
    def dtype(self) -> str:
        """The task's dtype as shown beside its name: its outputs' dtype (the precision it is
        judged in), their dtypes joined with '/' where they differ."""
        return "/".join(dict.fromkeys(a.dtype for a in self.outputs))


@dataclass(frozen=True)
class Tunable:
    """A launch parameter the candidate declares; becomes `#define NAME value`. The first value
    listed is the default."""

    name: str
    values: tuple[int, ...]


@dataclass(frozen=True)
class Scratch:
    """A temporary device buffer a candidate asks for (e.g. per-block partial sums)."""

    name: str
    dtype: str
    count: str  # element count, an expression of sizes and tunables
    zero: bool = False  # zero-filled before each launch sequence (otherwise NaN-poisoned)


@dataclass(frozen=True)
class TensorMap:
    """A tensor map a candidate asks for (fsr.tensormap): fsr encodes it on the host over one of
    the launch's buffers and passes it by value. Dimensions are listed innermost first, as the
    driver and the copy instructions take them; every number is an expression of sizes and
    tunables, in elements (strides too: fsr turns them into bytes)."""

    name: str
    buffer: str  # a task buffer or a scratch buffer; the element type is its dtype
    dims: tuple[str, ...]
    box: tuple[str, ...]
    strides: tuple[str, ...] = ()  # rank - 1 strides of dimensions 1.. in elements; () = packed
    element_strides: tuple[str, ...] = ()  # () = all 1
    swizzle: str = "none"  # none, 32B, 64B, 128B
    interleave: str = "none"  # none, 16B, 32B
    l2_promotion: str = "none"  # none, 64B, 128B, 256B
    oob_fill: str = "zero"  # zero, nan (floats only)


@dataclass(frozen=True, repr=False)
class LaunchSpec:
    """One kernel launch, declared as data. Grid, block and smem are expressions over the task's
    size variables and the candidate's tunables; `args` names task buffers, scratch buffers,
    tensor maps, size variables (passed as int32) or task constants (float32), in kernel
    parameter order. `when` (a condition; "" = always) says at which sizes the launch runs;
    `cluster` (1-3 expressions; () = none declared here) asks for thread block clusters."""

    kernel: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    args: tuple[str, ...]
    smem: str = "0"
    when: str = ""
    cluster: tuple[str, ...] = ()

    def __repr__(self) -> str:
        # A candidate's id hashes this text: the fields added later appear only when set, so the
        # ids of candidates that do not use them stay what they were (lineage compatibility).
        extra = "".join(f", {k}={v!r}" for k, v in (("when", self.when), ("cluster", self.cluster)) if v)
        return (f"LaunchSpec(kernel={self.kernel!r}, grid={self.grid!r}, block={self.block!r}, "
                f"args={self.args!r}, smem={self.smem!r}{extra})")


@dataclass(frozen=True)
class Origin:
    """Where a candidate came from: which proposer, which model, what it meant to do."""

    proposer: str = "user"
    model: str = ""
    features_requested: tuple[str, ...] = ()
    move: str = ""


@dataclass(frozen=True)
class Candidate:
    """A kernel variant: device code plus its declared launches. Never host code.

    `source` is the whole `.cu` text, header included; `defines` holds the tunable values this
    candidate is compiled with (missing tunables take their first declared value).
    """

    task: str
    source: str
    launches: tuple[LaunchSpec, ...]
    tunables: tuple[Tunable, ...] = ()
    features: tuple[Tunable, ...] = ()  # feature switches: defines set by proposers, never tuned
    scratch: tuple[Scratch, ...] = ()
    tensormaps: tuple[TensorMap, ...] = ()
    defines: Defines = ()
    compile_options: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()
    island: int = 0
    generation: int = 0
    origin: Origin = field(default_factory=Origin)
    # A certification request: the id of the screened candidate this one re-judges (at its tuned
    # defines); "" for a candidate to screen. Part of the id only when set, so screened ids stay
    # what they were and a request never collides with the candidate it certifies.
    certify: str = ""

    @property
    def id(self) -> str:
        """Content hash: source, defines, launches, scratch, tensor maps (where there are any) and
        compile options, and the candidate it certifies (for a certification request). Lineage
        fields (parents, island, origin) are not part of identity, so the same kernel is never
        evaluated twice."""
        h = hashlib.sha256()
        maps = (repr(self.tensormaps),) if self.tensormaps else ()  # absent: the ids of before
        certifies = (f"certify {self.certify}",) if self.certify else ()  # likewise
        for part in (self.task, self.source, repr(self.resolved_defines()), repr(self.launches),
                     repr(self.scratch), repr(self.compile_options), *maps, *certifies):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]

    def resolved_defines(self) -> Defines:
        """Every tunable's and feature's value: the candidate's own, else the first declared."""
        given = dict(self.defines)
        out = [(t.name, given.pop(t.name, t.values[0])) for t in self.tunables + self.features]
        out.extend(sorted(given.items()))
        return tuple(out)


@dataclass(frozen=True)
class Resources:
    """From the compiler's report (max over the candidate's kernels)."""

    registers: int = 0
    spill_bytes: int = 0  # spill stores + spill loads, bytes
    smem_static_bytes: int = 0
    stack_bytes: int = 0


@dataclass(frozen=True)
class Timing:
    """Device time of all of a candidate's launches, one sample per L2-flushed run."""

    median_us: float
    p10_us: float
    p90_us: float
    min_us: float
    samples_us: tuple[float, ...]
    gbps: float  # task bytes / median
    tflops: float
    ceiling_fraction: float  # max(bandwidth fraction, compute fraction) of the measured ceilings


@dataclass(frozen=True)
class SizeCheck:
    """Verification result at one size."""

    size: Size
    passed: bool
    max_abs_err: float = 0.0
    detail: str = ""  # first mismatches, or why it failed


@dataclass(frozen=True)
class DeviceInfo:
    """A GPU's properties and its measured ceilings."""

    name: str
    arch: str  # "sm_90"
    sm_count: int = 0
    smem_per_block: int = 0
    smem_per_block_optin: int = 0
    smem_per_sm: int = 0
    l2_bytes: int = 0
    regs_per_sm: int = 0
    copy_gbps: float = 0.0  # measured device-to-device copy, bytes read + written per second
    sgemm_tflops: float = 0.0  # measured library SGEMM
    tensor_tflops: float = 0.0  # measured TF32 tensor-core MMA rate (0: none); float32-accurate split TF32 reaches a third
    read_gbps: float = 0.0  # measured streaming read (no writes): the plausibility bound on bytes moved, with the copy
    half_tflops: float = 0.0  # measured 16-bit tensor-core GEMM (cuBLAS float16): the bound for bfloat16/float16 tasks


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a tuning run. `cached`: a repeat answered without calling the objective."""

    number: int
    values: tuple[tuple[str, int], ...]
    feasible: bool
    reason: str
    latency_us: float | None
    cached: bool = False


@dataclass(frozen=True)
class Evaluation:
    """The verdict on one candidate, with everything needed to study it offline."""

    candidate_id: str
    task: str
    verdict: Verdict
    message: str = ""
    checks: tuple[SizeCheck, ...] = ()
    timing: Timing | None = None
    baseline_us: float | None = None
    library_us: float | None = None
    torch_us: float | None = None  # PyTorch eager at the benchmark size, timed like the library
    torch_compile_us: float | None = None  # torch.compile of the same, timed alike (compile time apart)
    torch_compile_s: float | None = None  # what compiling it took, once per GPU child and task
    resources: Resources = field(default_factory=Resources)
    tuned_defines: Defines = ()
    tune_trials: int = 0
    trials: tuple[TrialRecord, ...] = ()  # every tuning trial, for the lineage's trials table
    device: str = ""
    toolchain: str = ""
    compile_s: float = 0.0
    verify_s: float = 0.0  # checks at every test size (in the GPU child)
    tune_s: float = 0.0
    bench_s: float = 0.0  # timing and the check after it
    wall_s: float = 0.0
    setup_s: float = 0.0  # of wall_s, the worker's own setup paid during this call: starting its GPU
    # child, preparing the task there (inputs, references, library and baseline timing)
    comparators_s: float = 0.0  # of setup_s, GPU seconds of comparators timed beside candidates
    # (any task's: not a preparation of this evaluation's own task)
    diagnostics: str = ""  # digested facts from the machine code (fsr.evaluate.diagnose); "" where not compiled
    worker: str = ""  # the GPU worker that gave the verdict, stamped by the executor ("" before)
    dtype: str = ""  # the task's dtype (Task.dtype), stamped by the evaluator ("" where the task is unknown)
    tier: Tier = Tier.SCREEN
    certified: bool | None = None  # a certification's outcome (None: a screening, which certifies nothing)
    failed_check: str = ""  # a failed certification: the input set or check that failed ("timing", ...)
    cut_short: bool = False  # its timing stopped early: its samples already showed it clearly slower
    answered_from: str = ""  # the earlier candidate whose judgement answered this one (same program run)
    certify_seeds: Seeds = ()  # a certification: the seed of each input set it drew, by the set's name
    control_us: float | None = None  # a certification: its median on the screening's own benchmark sets,
    # timed right after the fresh set in the same load (the timing check's pair, fsr.certification)

    @property
    def speedup(self) -> float | None:
        """Baseline median over this candidate's median; None unless OK and timed."""
        if self.verdict != Verdict.OK or self.timing is None or not self.baseline_us:
            return None
        return self.baseline_us / self.timing.median_us


@dataclass(frozen=True)
class Comparison:
    """A task's comparators (the library, PyTorch eager, torch.compile) as a worker answered for
    them after a campaign's last evaluation (Executor.compare): no candidate and no verdict. A
    comparator that ran and failed, or that the task lacks, is None (`missed` says why where it
    failed); `left` says why none was answered for ("" when they were): the wait's bound ran out,
    or fsr's own machinery failed (never the task's fault). `fresh`: timed for this question,
    rather than answered from the worker's record of an earlier timing."""

    task: str
    device: str = ""
    library_us: float | None = None
    torch_us: float | None = None
    torch_compile_us: float | None = None
    torch_compile_s: float | None = None
    missed: tuple[str, ...] = ()
    left: str = ""
    fresh: bool = False
    worker: str = ""  # stamped by the executor

    @property
    def figures(self) -> dict[str, float]:
        """The comparators timed, by their lineage column (library_us, torch_us, ...)."""
        values = {"library_us": self.library_us, "torch_us": self.torch_us,
                  "torch_compile_us": self.torch_compile_us, "torch_compile_s": self.torch_compile_s}
        return {k: v for k, v in values.items() if v is not None}


class EvaluatorFault(RuntimeError):
    """fsr's own machinery failed while judging a candidate (raised by an evaluator, and across
    a Ray boundary inside RayTaskError): the GPU child failed in fsr's code on two fresh children
    in a row, or a task could not be prepared. It says nothing about the candidate, so it is never
    a verdict: a cluster executor counts it as a lost worker and evaluates the candidate again
    elsewhere (cluster.faults); the local executor stops the run with the reason."""




@dataclass(frozen=True)
class WorkerSpec:
    """What a GPU worker and its GPU child need for a campaign, built once by the driver and
    passed whole: the tasks as the driver loaded them (contents, never re-read from disk), the
    eval and tune configuration, where tuning studies are journaled, the threads of the child's
    host work, and the tasks every GPU child starts preparing as it starts."""

    tasks: tuple[Task, ...]
    eval: EvalConfig = field(default_factory=EvalConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    journal_dir: str | None = None  # the Optuna journal of tuning studies goes here (None: no journal)
    host_threads: int = 0  # the GPU child's BLAS threads; 0: the worker's share of its node's cores
    warm: tuple[str, ...] = ()  # task names whose benchmark contents each GPU child builds from its
    # start, in order, within its host budget (the rest are built when asked for); an executor
    # that gives each worker a share of the tasks gives each its own order (its share first)

    @classmethod
    def of(cls, config: Config, tasks: Sequence[Task], journal_dir: str | None = None,
           warm: bool = False) -> WorkerSpec:
        """The spec of `config` for `tasks` (all of them warmed, in order, with `warm`);
        `eval.host_threads` set wins over each worker's share."""
        return cls(tuple(tasks), config.eval, config.tune, journal_dir, config.eval.host_threads,
                   tuple(t.name for t in tasks) if warm else ())

    def task(self, name: str) -> Task | None:
        """The task of this name, or None when the campaign has none."""
        return next((t for t in self.tasks if t.name == name), None)

    def warmed(self) -> tuple[Task, ...]:
        """The tasks `warm` names, in its order, each once (a name the campaign lacks left out)."""
        return tuple(t for t in map(self.task, dict.fromkeys(self.warm)) if t is not None)


@dataclass(frozen=True)
class WorkerInfo:
    """Where a GPU worker runs and on what GPU; returned once when the actor is ready."""

    device: DeviceInfo
    node_id: str
    node_ip: str
    gpu_ids: tuple[str, ...]
    pid: int
