"""The compile pool: a compile past its deadline or memory ceiling, or one whose compiler dies,
is a one-line compile failure; the pool goes on compiling honest code; no process is left behind.

NVRTC runs on the CPU, so none of this needs a GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from fsr.evaluate.compile import CompileFailed, nvrtc
from fsr.evaluate.compile_pool import CompileLimit, CompilePool, Limits, PoolBroken, worker_compiler

OPTIONS = ("--gpu-architecture=sm_90", "--std=c++17", "-Xptxas=-v")
HONEST = 'extern "C" __global__ void add(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] += 1.0f; }'
BROKEN = 'extern "C" __global__ void add(float* y) { y[0] = undefined_name; }'

# A G x G grid of inlined template instantiations: compile time grows faster than G^2
# (G = 30 takes about 6 s on a two-core machine, G = 90 minutes).
EXPLODING = textwrap.dedent("""
    template<int I, int J> __device__ __forceinline__ float f(float x) { return x * (float)(I + 1) + (float)J; }
    template<int I, int J> struct Row { __device__ static __forceinline__ float go(float x) { return f<I, J>(x) + Row<I, J - 1>::go(x); } };
    template<int I> struct Row<I, 0> { __device__ static __forceinline__ float go(float x) { return f<I, 0>(x); } };
    template<int I> struct Grid { __device__ static __forceinline__ float go(float x) { return Row<I, G>::go(x) + Grid<I - 1>::go(x); } };
    template<> struct Grid<0> { __device__ static __forceinline__ float go(float x) { return Row<0, G>::go(x); } };
    extern "C" __global__ void k(float* y) { y[threadIdx.x] = Grid<G>::go(y[threadIdx.x]); }
""")
# An initialised 64 MiB device array: the compiler holds it as text several times over
# (about 470 MB resident).
HUNGRY = '__device__ int table[1 << 24] = {1};\nextern "C" __global__ void k(int* y) { y[threadIdx.x] = table[threadIdx.x]; }'


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read()
    except OSError:
        return False


def gone_within(pids: list[int], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def pool():
    p = CompilePool(1, Limits(deadline_s=2.0, max_bytes=300 * 1024**2))
    yield p
    p.close()


def test_an_honest_compile_matches_the_in_process_compile(pool):
    got = pool.compile(HONEST, ("add",), OPTIONS)
    want = nvrtc(HONEST, ("add",), OPTIONS)
    assert got.lowered == want.lowered
    assert got.resources == want.resources
    assert got.cubin[:4] == b"\x7fELF"


def test_a_compile_error_keeps_the_compiler_log_and_the_process(pool):
    with pytest.raises(CompileFailed) as e:
        pool.compile(BROKEN, ("add",), OPTIONS)
    assert not isinstance(e.value, CompileLimit)
    assert "undefined_name" in e.value.log
    pids = pool.pids()
    pool.compile(HONEST, ("add",), OPTIONS)
    assert pool.pids() == pids and pool.replaced == 0


def test_a_compile_past_its_deadline_fails_in_one_line_and_the_next_compiles(pool):
    pids_before = pool.pids()
    start = time.monotonic()
    with pytest.raises(CompileLimit) as e:
        pool.compile("#define G 60\n" + EXPLODING, ("k",), OPTIONS)
    assert time.monotonic() - start < 2.0 + 3.0
    assert str(e.value) == "compile exceeded 2 s"
    assert "\n" not in str(e.value)
    pool.compile(HONEST, ("add",), OPTIONS)  # the same pool, a fresh process
    assert pool.replaced == 1
    assert pids_before == [] or not any(alive(p) for p in pids_before)


def test_a_compile_past_its_memory_ceiling_fails_in_one_line(pool):
    pool.limits = Limits(deadline_s=60.0, max_bytes=300 * 1024**2)
    start = time.monotonic()
    with pytest.raises(CompileLimit, match=r"^compile exceeded 300 MiB of memory$"):
        pool.compile(HUNGRY, ("k",), OPTIONS)
    assert time.monotonic() - start < 30
    pool.compile(HONEST, ("add",), OPTIONS)


def test_a_compiler_that_dies_mid_compile_is_a_crash_with_its_signal(pool):
    pool.limits = Limits(deadline_s=60.0, max_bytes=4 * 1024**3)
    pool.compile(HONEST, ("add",), OPTIONS)  # the process is up
    [pid] = pool.pids()
    # A stand-in for NVRTC crashing: the compile process gets SIGSEGV while it compiles.
    threading.Timer(0.5, os.kill, (pid, signal.SIGSEGV)).start()
    with pytest.raises(CompileLimit, match=r"^the compiler crashed: SIGSEGV$"):
        pool.compile("#define G 60\n" + EXPLODING, ("k",), OPTIONS)
    pool.compile(HONEST, ("add",), OPTIONS)
    assert not alive(pid)


def test_close_leaves_no_compile_process():
    p = CompilePool(2, Limits(deadline_s=30.0, max_bytes=4 * 1024**3))
    threads = [threading.Thread(target=p.compile, args=(HONEST, ("add",), OPTIONS)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pids = p.pids()
    assert len(pids) == 2
    p.close()
    assert gone_within(pids, 5.0)


def test_compile_processes_die_with_their_owner(tmp_path):
    """A worker killed outright (SIGKILL, no clean-up) takes its compile processes with it,
    even one busy compiling."""
    script = textwrap.dedent(f"""
        import sys, threading, time
        from fsr.evaluate.compile_pool import CompilePool, Limits
        p = CompilePool(1, Limits(deadline_s=600.0, max_bytes=4 * 1024**3))
        threading.Thread(target=p.compile, args=({'#define G 60' + chr(10) + EXPLODING!r}, ("k",), {OPTIONS!r}),
                         daemon=True).start()
        while not p.pids():
            time.sleep(0.05)
        print(p.pids()[0], flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=os.getcwd())
    assert owner.stdout is not None
    pid = int(owner.stdout.readline())
    time.sleep(1.0)  # the compile is under way
    assert alive(pid)
    owner.kill()
    owner.wait()
    assert gone_within([pid], 5.0)


# ---- through the evaluator's static stage and `fsr eval` ------------------------------------

SOFTMAX_HEADER = """/* fsr
[[launch]]
kernel = "k"
grid = ["rows"]
block = ["256"]
args = ["x", "y", "rows", "cols"]
*/
"""
HONEST_SOFTMAX = SOFTMAX_HEADER + textwrap.dedent("""
    extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
        int r = blockIdx.x;
        if (threadIdx.x == 0) {
            float m = -INFINITY, s = 0.0f;
            for (int c = 0; c < cols; ++c) m = fmaxf(m, x[(size_t)r * cols + c]);
            for (int c = 0; c < cols; ++c) s += expf(x[(size_t)r * cols + c] - m);
            for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = expf(x[(size_t)r * cols + c] - m) / s;
        }
    }
""")
EXPLODING_SOFTMAX = SOFTMAX_HEADER + "#define G 60\n" + EXPLODING.replace(
    'extern "C" __global__ void k(float* y) { y[threadIdx.x] = Grid<G>::go(y[threadIdx.x]); }',
    'extern "C" __global__ void k(const float* x, float* y, int rows, int cols) '
    '{ y[threadIdx.x] = Grid<G>::go(x[threadIdx.x]); }')
HUNGRY_SOFTMAX = SOFTMAX_HEADER + '__device__ int table[1 << 24] = {1};\n' \
    'extern "C" __global__ void k(const float* x, float* y, int rows, int cols) { y[threadIdx.x] = table[threadIdx.x]; }'


@pytest.fixture
def bounded(request):
    """A compile service on a small bounded pool and no disk cache, closed afterwards."""
    from fsr.evaluate.compile import CompileService

    deadline_s, max_bytes = getattr(request, "param", (3.0, 300 * 1024**2))
    pool = CompilePool(1, Limits(deadline_s, max_bytes))
    yield CompileService(pool=pool)
    pool.close()
    assert gone_within(pool.pids(), 5.0) or not pool.pids()


@pytest.mark.parametrize("bounded, source, reason", [
    ((3.0, 4 * 1024**3), EXPLODING_SOFTMAX, "compile exceeded 3 s"),
    ((60.0, 300 * 1024**2), HUNGRY_SOFTMAX, "compile exceeded 300 MiB of memory"),
], indirect=["bounded"])
def test_a_bounded_compile_is_a_compile_error_and_the_next_candidate_compiles(bounded, source, reason):
    from fsr import candidate as cfmt
    from fsr import tasks
    from fsr.evaluate.static import static_stage
    from fsr.types import Verdict

    task = tasks.load("softmax")
    start = time.monotonic()
    static = static_stage(cfmt.parse(source, task), task, "sm_90", bounded)
    assert time.monotonic() - start < bounded.pool.limits.deadline_s + 5.0
    assert static.verdict is not None and static.verdict.verdict == Verdict.COMPILE_ERROR
    assert static.verdict.message == reason
    honest = static_stage(cfmt.parse(HONEST_SOFTMAX, task), task, "sm_90", bounded)
    assert honest.verdict is None and honest.compiled is not None
    assert len(bounded.pool.pids()) == 1  # the replacement, and nothing else


@pytest.mark.parametrize("bounded", [(60.0, 300 * 1024**2)], indirect=True)
def test_a_bounded_compile_is_never_cached(bounded, tmp_path):
    from fsr import candidate as cfmt
    from fsr import tasks
    from fsr.evaluate import compile_cache

    bounded.disk = compile_cache.open_cache(tmp_path)
    task = tasks.load("softmax")
    with pytest.raises(CompileLimit):
        bounded.compile(cfmt.parse(HUNGRY_SOFTMAX, task), "sm_90")
    assert not bounded.memory
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".json"]


def test_a_workers_compile_service_is_built_from_its_configuration(tmp_path):
    from fsr.config import EvalConfig

    cfg = EvalConfig(compile_cache_dir=str(tmp_path / "cache"), compile_timeout_s=7.0, compile_max_bytes=512 * 1024**2)
    service = worker_compiler(cfg, 3)
    assert service.disk is not None and service.disk.root == tmp_path / "cache"
    assert isinstance(service.pool, CompilePool) and service.pool.size == 3
    assert service.pool.limits == Limits(7.0, 512 * 1024**2)
    child = worker_compiler(EvalConfig(compile_cache_dir="off"), 1, deadline_s=2.5)
    assert child.disk is None and isinstance(child.pool, CompilePool) and child.pool.limits.deadline_s == 2.5
    service.close()
    with pytest.raises(PoolBroken):  # closed: proposer code never falls back to compiling in this process
        service.compile(_candidate(HONEST_SOFTMAX), "sm_90")


def test_the_gpu_evaluator_compiles_proposer_code_in_bounded_processes_and_closes_them():
    from fsr.config import EvalConfig
    from fsr.evaluate.evaluator import GpuEvaluator
    from fsr.types import WorkerSpec

    evaluator = GpuEvaluator(WorkerSpec((), EvalConfig(compile_timeout_s=9.0)), None)
    assert isinstance(evaluator.compiler.pool, CompilePool) and evaluator.compiler.pool.limits.deadline_s == 9.0
    evaluator.close()
    given = worker_compiler(EvalConfig(compile_cache_dir="off"), 1)
    evaluator = GpuEvaluator(WorkerSpec((), EvalConfig()), given)
    assert evaluator.compiler is given
    evaluator.close()
    with pytest.raises(PoolBroken):
        given.compile(_candidate(HONEST_SOFTMAX), "sm_90")


def _candidate(source: str):
    from fsr import candidate as cfmt
    from fsr import tasks

    task = tasks.load("softmax")
    return cfmt.parse(source, task)


def test_fsr_eval_ends_within_the_compile_deadline_with_the_reason(tmp_path):
    cand = tmp_path / "explode.cu"
    cand.write_text(EXPLODING_SOFTMAX)
    config = tmp_path / "fsr.toml"
    config.write_text('[eval]\ncompile_timeout_s = 3.0\ncompile_cache_dir = "off"\n')
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fsr", "--config", str(config), "eval", "softmax", str(cand)],
                          capture_output=True, text=True, timeout=120, cwd=os.getcwd())
    assert time.monotonic() - start < 3.0 + 15.0  # the interpreter's start and imports included
    assert done.returncode == 1, done.stderr
    assert "COMPILE_ERROR" in done.stdout + done.stderr
    assert "compile exceeded 3 s" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_pool_starts_only_as_many_processes_as_compiles_ran_at_once():
    """Compiles one after another reuse one process; two at once start a second. (Taken first in,
    first out, every compile started a new process until the pool was full: a worker's two pools
    of up to 16 processes each.)"""
    p = CompilePool(4, Limits(deadline_s=30.0, max_bytes=300 * 1024**2))
    try:
        for _ in range(3):
            p.compile(HONEST, ("add",), OPTIONS)
        assert len(p.pids()) == 1
        with ThreadPoolExecutor(2) as threads:
            list(threads.map(lambda _: p.compile(HONEST, ("add",), OPTIONS), range(4)))
        assert 1 <= len(p.pids()) <= 2
    finally:
        p.close()


def test_a_pool_started_ahead_compiles_on_the_processes_it_started():
    """A campaign's pool starts its processes before any compile (their start costs seconds that
    a worker's first candidates would wait for); the compiles then run on them, none started anew."""
    p = CompilePool(3, Limits(deadline_s=30.0, max_bytes=300 * 1024**2))
    try:
        assert p.start(5) == 3  # at most the pool's size
        started = set(p.pids())
        assert len(started) == 3
        assert p.start(3) == 0  # started already: nothing more
        with ThreadPoolExecutor(3) as threads:
            results = list(threads.map(lambda _: p.compile(HONEST, ("add",), OPTIONS), range(6)))
        assert all(r.cubin for r in results)
        assert set(p.pids()) == started
    finally:
        p.close()
    assert gone_within(list(started), 10.0)
    assert p.start(3) == 0  # a closed pool starts nothing


def test_a_pool_closed_while_its_processes_start_leaves_none_behind():
    p = CompilePool(8, Limits(deadline_s=30.0, max_bytes=300 * 1024**2))
    spawned: list[int] = []
    real = subprocess.Popen

    def spawn(*args, **kwargs):  # the pool closes while its processes are being started
        proc = real(*args, **kwargs)
        spawned.append(proc.pid)
        if len(spawned) == 3:
            p.close()
        return proc

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "Popen", spawn)
        started = p.start(8)
    assert started == 2 and len(spawned) == 3  # the third was started as the pool closed: killed
    assert gone_within(spawned, 10.0)
    with pytest.raises(PoolBroken):
        p.compile(HONEST, ("add",), OPTIONS)


def test_a_campaigns_compile_service_starts_its_processes_and_fsr_evals_does_not():
    from fsr.config import EvalConfig

    cfg = EvalConfig(compile_cache_dir="off")
    campaign, single = worker_compiler(cfg, 2, start=True), worker_compiler(cfg, 2)
    try:
        assert isinstance(campaign.pool, CompilePool) and isinstance(single.pool, CompilePool)
        end = time.monotonic() + 30.0  # started on a thread, while the caller goes on
        while len(campaign.pool.pids()) < 2 and time.monotonic() < end:
            time.sleep(0.02)
        assert len(campaign.pool.pids()) == 2
        assert single.pool.pids() == []
    finally:
        campaign.close()
        single.close()
