"""What the GPU tests' evaluators share (tests/support/gpu_evaluators.py), checked without a GPU: a
task held to its test sizes times at its largest one, and candidates compiled ahead are found in
the evaluator's compile cache, while a candidate the static stage refuses is not compiled."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fsr import candidate, tasks
from fsr.config import Config
from fsr.evaluate.compile import CompileService
from tests.support.gpu_evaluators import at_test_sizes, precompile, spec
from tests.support.paths import ADVERSARIAL
from tests.support.templates import extremes, sample


@pytest.mark.parametrize("name", ["attention", "sgemm", "scan", "spmv_csr"])
def test_a_task_at_its_test_sizes_times_at_the_largest(name):
    task = tasks.load(name)
    small = at_test_sizes(task)
    largest = max(tasks.input_elements(task, dict(s)) for s in task.test_sizes)
    assert small.bench_size in task.test_sizes and tasks.input_elements(task, dict(small.bench_size)) == largest
    assert largest < tasks.input_elements(task, dict(task.bench_size))
    assert small.test_sizes == task.test_sizes and small.content_hash == task.content_hash


class Counting(CompileService):
    def __init__(self) -> None:
        super().__init__()
        self.misses = 0

    def _miss(self, source, kernels, options):
        self.misses += 1
        return super()._miss(source, kernels, options)


def test_candidates_compiled_ahead_are_cache_hits_and_refused_ones_are_not_compiled():
    softmax = tasks.load("softmax")
    device = SimpleNamespace(arch="sm_90")
    compiler = Counting()
    evaluator = SimpleNamespace(device=lambda: device, spec=spec(Config(), ("softmax",)), compiler=compiler)
    good = [candidate.with_defines(candidate.parse(softmax.baseline_source, softmax), {"BLOCK": b}) for b in (128, 256)]
    refused = candidate.parse((ADVERSARIAL / "softmax" / "include_file.cu").read_text(), softmax)
    precompile(evaluator, good + [refused])  # type: ignore[arg-type]
    assert compiler.misses == 2  # the include was refused by the guards before any compile
    for cand in good:
        compiler.compile(cand, device.arch)
    assert compiler.misses == 2  # what the evaluation compiles next is already there


def test_the_gpu_sample_is_split_at_the_switch_extremes():
    """The bench-size module takes the extremes of the sample, the test-size module the rest: the
    two together are the whole sample, as one module checked it before."""
    for name in ("sgemm", "scan", "softmax"):
        task = tasks.load(name)
        template = candidate.parse(task.template_source or "", task)
        whole = sample(template, 1, 4)
        ends = [v for v in whole if v in extremes(template)]
        rest = [v for v in whole if v not in extremes(template)]
        assert ends == extremes(template) and len(ends) + len(rest) == len(whole) and len(rest) >= 1
