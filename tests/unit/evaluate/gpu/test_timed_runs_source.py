"""The timed-output check's device code compiles with NVRTC here (no GPU) for every output dtype
the built-in tasks declare and every low-precision float, with the expected values' dtype
verify.expect gives it."""

from __future__ import annotations

import pytest

from fsr import dtypes, tasks
from fsr.evaluate.gpu import timed_runs


def pairs() -> set[tuple[str, str]]:
    kinds = {arg.dtype for name in tasks.list_tasks() for arg in tasks.load(name).outputs}
    return {(kind, dtypes.expected_dtype(kind).name) for kind in kinds | set(dtypes.LOW_PRECISION)}


@pytest.mark.parametrize("got,value", sorted(pairs()))
def test_check_decoy_and_veil_kernels_compile_for_each_output_dtype(got, value):
    from cupy_backends.cuda.libs import nvrtc

    t, v = timed_runs.C_TYPES[got], timed_runs.C_TYPES[value]
    names = [f"fsr_count_bad<{t}, {v}>", f"fsr_decoy<{t}, {v}>", f"fsr_veil<{v}>", "fsr_fingerprint"]
    prog = nvrtc.createProgram(timed_runs.CHECK_SOURCE, "check.cu", [], [])
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
        nvrtc.compileProgram(prog, ["-arch=sm_90", "-std=c++17"])
        assert all(nvrtc.getLoweredName(prog, n) for n in names)
        assert nvrtc.getLoweredName(prog, "fsr_fingerprint") == "fsr_fingerprint"  # looked up by its plain name
    finally:
        nvrtc.destroyProgram(prog)
