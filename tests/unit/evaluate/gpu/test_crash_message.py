"""A CRASH verdict's message: one line naming the CUDA error and what it means for the kernel's
author, never a traceback (CuPy's runtime errors can be built without a GPU)."""

from __future__ import annotations

import pytest

cp = pytest.importorskip("cupy")

from fsr.evaluate.gpu.programs import crash_line, is_context_error  # noqa: E402


@pytest.mark.parametrize("status,meaning", [(700, "outside its buffers"), (716, "not aligned"),
                                            (719, "faulted"), (710, "trap")])
def test_a_broken_context_is_one_line_with_the_error_and_its_meaning(status, meaning):
    error = cp.cuda.runtime.CUDARuntimeError(status)
    line = crash_line(error)
    assert is_context_error(error)
    assert "\n" not in line and meaning in line and str(error).split(":")[0] in line
    assert "Traceback" not in line and ".py" not in line


def test_an_error_that_leaves_the_context_usable_is_not_a_crash():
    error = cp.cuda.runtime.CUDARuntimeError(1)  # invalid value: a machinery fault, not the kernel's
    assert not is_context_error(error)
    assert "\n" not in crash_line(error)
