"""A scripted OpenAI-compatible chat server for tests and bench/, canned replies, and an evaluator stand-in.

`ScriptedServer` listens on 127.0.0.1 (port 0: the system picks) in a thread and answers
POST /v1/chat/completions from a queue of behaviours, one per request (and GET /v1/models with
the ids given as `models`, 501 without them, as a server that lists none), recording every request
body and header it receives. When the queue is empty it answers 500 "script exhausted", so a
client that asks more than the test meant is seen, never hangs. Behaviours: `Reply` (choices
with given texts, with or without usage), `Status` (an HTTP error, optionally with Retry-After),
`Slow` (waits, then behaves), `Drop` (closes the socket without a reply), `EchoKey` (a 401 whose
message repeats the bearer token, as some servers do).

`StandInEvaluator` runs the evaluator's static stage for real (header, guards, NVRTC compile,
which needs no GPU) and then stands in for the GPU: kernels named in `wrong` are WRONG with a
mismatch report shaped like the real one, others OK with a latency by kernel name.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from fsr import certification
from fsr.evaluate.compile import CompileService
from fsr.evaluate.static import static_stage
from fsr.execute.base import Evaluator
from fsr.tasks import load
from fsr.types import (
    Candidate,
    Comparison,
    DeviceInfo,
    Evaluation,
    SizeCheck,
    Task,
    Tier,
    Timing,
    Verdict,
)

# ---- canned kernels (softmax, the candidate format) -------------------------------------------

GOOD_KERNEL = r"""/* fsr
[tunables]
BLOCK = [256, 128, 512]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
// One block per row: block-wide max and sum through warp shuffles and shared memory.
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                        int rows, int cols) {
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = lane < warps ? red[lane] : -INFINITY;
    m = warp_max(m);
    __syncthreads();
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    s = warp_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = lane < warps ? red[lane] : 0.0f;
    s = warp_sum(s);
    float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}
"""

# The same kernel with float4 loads where rows are aligned: another id, "faster" in the stand-in.
FAST_KERNEL = GOOD_KERNEL.replace('kernel = "softmax_rows"', 'kernel = "softmax_fast"').replace(
    "void softmax_rows(", "void softmax_fast(").replace(
    "    float m = -INFINITY;\n    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);",
    "    float m = -INFINITY;\n    if ((cols & 3) == 0) {\n"
    "        const float4* x4 = reinterpret_cast<const float4*>(xr);\n"
    "        for (int c = threadIdx.x; c < cols / 4; c += blockDim.x) {\n"
    "            float4 v = x4[c];\n"
    "            m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));\n"
    "        }\n"
    "    } else {\n"
    "        for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);\n"
    "    }")

COMPILE_ERROR_KERNEL = GOOD_KERNEL.replace('kernel = "softmax_rows"', 'kernel = "softmax_broken"').replace(
    "void softmax_rows(", "void softmax_broken(").replace("float inv = 1.0f / s;",
                                                          "float inv = undefined_scale / s;")
COMPILE_ERROR_LINE = 'identifier "undefined_scale" is undefined'

# Right format, wrong math: no max subtraction and no normalisation.
WRONG_KERNEL = r"""/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "softmax_wrong"
grid = ["cdiv(rows * cols, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void softmax_wrong(const float* x, float* y, int rows, int cols) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)rows * cols) y[i] = expf(x[i]);
}
"""
WRONG_MESSAGE = ("at rows=17,cols=1000: 17000 of 17000 elements wrong; y[0, 0] got 2.71828 expected "
                 "0.000412; y[0, 1] got 0.367879 expected 5.58e-05")


def fenced(code: str, lang: str = "cuda", before: str = "Here is the kernel.", after: str = "") -> str:
    return f"{before}\n\n```{lang}\n{code}```\n{after}"


def prose_with_blocks() -> str:
    """A chatty reply: the old kernel without a header, a Python check, then the new kernel."""
    return ("The current kernel does three passes:\n\n```cuda\n__global__ void old(float* y) { }\n```\n\n"
            "You can check it with:\n\n```python\nimport numpy as np\nprint(np.exp(1))\n```\n\n"
            "The improved version uses one block per row:\n\n" + fenced(GOOD_KERNEL, "cpp", before="")
            + "\nIt should be about 30x faster.")


# ---- behaviours ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    """A 200 with one choice per text (whatever `n` asked: a server that ignores `n` is a Reply
    with one text). `usage=False` leaves usage out, as some servers do."""

    texts: tuple[str, ...]
    usage: bool = True
    finish_reason: str = "stop"


def reply(*texts: str, usage: bool = True, finish_reason: str = "stop") -> Reply:
    return Reply(tuple(texts), usage, finish_reason)


@dataclass(frozen=True)
class Status:
    code: int
    message: str = "scripted error"
    retry_after: str | None = None


@dataclass(frozen=True)
class Slow:
    """Wait `seconds` (past the client's timeout, usually), then behave as `then`."""

    seconds: float
    then: Any = None


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class EchoKey:
    """A 401 that repeats the bearer token in its message."""


EMPTY = Reply(())  # a 200 with no choices


class ScriptedServer:
    """See the module docstring. Use as a context manager; `base_url` ends in /v1."""

    def __init__(self, script: Iterable[Any] = (), models: Iterable[str] | None = None) -> None:
        self.script: deque[Any] = deque(script)
        # GET /v1/models answers these ids; None: no model list (501, as a server without one)
        self.models = None if models is None else list(models)
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.arrivals: list[float] = []  # time.monotonic() of each request
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def push(self, *behaviours: Any) -> None:
        with self._lock:
            self.script.extend(behaviours)

    def prompts(self) -> list[str]:
        """The user message of each request received, in order."""
        return ["\n".join(m["content"] for m in b["messages"] if m["role"] == "user") for b in self.bodies]

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        with self._lock:
            self.bodies.append(body)
            self.headers.append(headers)
            self.arrivals.append(time.monotonic())
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            return self.script.popleft() if self.script else Status(500, "script exhausted")

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models" or server.models is None:
                self._json(501 if server.models is None else 404, {"error": {"message": f"no route {self.path}"}})
                return
            self._json(200, {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                                                        for m in server.models]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            behaviour = server._next(body, {k.lower(): v for k, v in self.headers.items()})
            try:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    behaviour = Status(404, f"no route {self.path}")
                self._act(behaviour, body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first (a timeout): nothing to answer
            finally:
                server._done()

        def _act(self, behaviour: Any, body: dict[str, Any]) -> None:
            if isinstance(behaviour, Slow):
                server.stop.wait(behaviour.seconds)
                behaviour = behaviour.then or reply(GOOD_KERNEL)
            if isinstance(behaviour, Drop):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if isinstance(behaviour, EchoKey):
                token = self.headers.get("Authorization", "")
                self._json(401, {"error": {"message": f"Incorrect API key provided: {token}",
                                           "type": "invalid_request_error"}})
                return
            if isinstance(behaviour, Status):
                extra = {"Retry-After": behaviour.retry_after} if behaviour.retry_after is not None else {}
                self._json(behaviour.code, {"error": {"message": behaviour.message, "type": "scripted"}}, extra)
                return
            assert isinstance(behaviour, Reply), behaviour
            self._json(200, _completion(body, behaviour))

        def _json(self, code: int, doc: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _completion(body: dict[str, Any], behaviour: Reply) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": i, "message": {"role": "assistant", "content": t},
                     "finish_reason": behaviour.finish_reason} for i, t in enumerate(behaviour.texts)],
    }
    if behaviour.usage:
        prompt = len(json.dumps(body.get("messages", []))) // 4
        completion = sum(len(t) for t in behaviour.texts) // 4
        doc["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                        "total_tokens": prompt + completion}
    return doc


# ---- the evaluator stand-in --------------------------------------------------------------------

def _timing(median_us: float) -> Timing:
    return Timing(median_us=median_us, p10_us=median_us, p90_us=median_us, min_us=median_us,
                  samples_us=(median_us,), gbps=0.0, tflops=0.0, ceiling_fraction=0.0)


@dataclass
class StandInEvaluator:
    """See the module docstring. `latency_us` maps kernel names to latencies."""

    latency_us: Mapping[str, float] = field(default_factory=lambda: {"softmax_baseline": 4650.0,
                                                                     "softmax_rows": 200.0,
                                                                     "softmax_fast": 150.0})
    wrong: frozenset[str] = frozenset({"softmax_wrong"})
    default_us: float = 500.0
    baseline_us: float = 4650.0
    calls: list[str] = field(default_factory=list)
    # The scripted kernels are fsr's own: compiled in this process.
    compiler: CompileService = field(default_factory=CompileService)
    _tasks: dict[str, Task] = field(default_factory=dict)

    def evaluate(self, cand: Candidate) -> Evaluation:
        self.calls.append(cand.id)
        task = self._tasks.setdefault(cand.task, load(cand.task))
        static = static_stage(cand, task, "sm_90", self.compiler)
        if static.verdict is not None:
            if cand.certify:
                return certification.failure(replace(static.verdict, tier=Tier.CERTIFY), "compile",
                                             static.verdict.message, static.verdict.verdict)
            return static.verdict
        assert static.compiled is not None
        kernel = cand.launches[0].kernel
        tier = Tier.CERTIFY if cand.certify else Tier.SCREEN
        if kernel in self.wrong:
            checks = (SizeCheck(task.test_sizes[0], True), SizeCheck(task.test_sizes[1], True),
                      SizeCheck(task.test_sizes[2], False, 2.7, WRONG_MESSAGE.partition(": ")[2]))
            wrong = Evaluation(cand.id, cand.task, Verdict.WRONG, WRONG_MESSAGE, checks=checks,
                               resources=static.compiled.resources, device=self.device().name, tier=tier)
            if cand.certify:  # a certification request: its failure names the set
                return certification.failure(wrong, certification.test_set(task.test_sizes[2]),
                                             WRONG_MESSAGE, Verdict.WRONG)
            return wrong
        return Evaluation(cand.id, cand.task, Verdict.OK, timing=_timing(self.latency_us.get(kernel, self.default_us)),
                          baseline_us=self.baseline_us, resources=static.compiled.resources,
                          device=self.device().name, tier=tier, certified=True if cand.certify else None)

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """No comparators stand in: none timed, none left."""
        return [Comparison(t, self.device().name) for t in tasks]

    def device(self) -> DeviceInfo:
        return DeviceInfo("stand-in H200", "sm_90", 132, 49152, 232448, 233472, 60 * 2**20, 65536, 4140.0, 50.6, 317.0)

    def close(self) -> None:
        pass


if TYPE_CHECKING:  # mypy holds the stand-in to the protocol it stands in for
    _stand_in: Evaluator = StandInEvaluator()
