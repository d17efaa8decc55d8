"""A machine whose NVRTC cannot be loaded: one line naming the fix, exit 2, never a traceback or a
verdict (it is not the candidate's fault)."""

from __future__ import annotations

import pytest

from fsr import cli
from fsr.evaluate import compile as nvcompile
from tests.support.paths import ROOT


@pytest.fixture
def no_nvrtc(monkeypatch: pytest.MonkeyPatch):
    from cupy_backends.cuda.libs import nvrtc

    def missing() -> tuple[int, int]:
        raise OSError("libnvrtc.so.13: cannot open shared object file")

    monkeypatch.setattr(nvrtc, "getVersion", missing)
    nvcompile._library.cache_clear()
    nvcompile.toolchain_id.cache_clear()
    yield
    nvcompile._library.cache_clear()
    nvcompile.toolchain_id.cache_clear()


def test_a_missing_nvrtc_is_one_line_naming_the_package(no_nvrtc, capsys):
    with pytest.raises(nvcompile.CompilerUnavailable, match="nvidia-cuda-nvrtc"):
        nvcompile.nvrtc_version()
    code = cli.main(["eval", "softmax", str(ROOT / "examples/softmax_fast.cu")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("fsr: error: NVRTC cannot be loaded") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_a_working_nvrtc_answers_after_it_was_missing(no_nvrtc, monkeypatch):
    with pytest.raises(nvcompile.CompilerUnavailable):
        nvcompile.nvrtc_version()
    monkeypatch.undo()
    nvcompile._library.cache_clear()
    assert nvcompile.nvrtc_version().startswith("nvrtc ")
