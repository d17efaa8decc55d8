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


class FlakyNvrtc:
    """An NVRTC stand-in whose first `failures` compiles fail with `log`, then succeed."""

    class NVRTCError(Exception):
        pass

    def __init__(self, failures: int, log: str) -> None:
        self.failures, self.fail_log, self.compiles, self.live = failures, log, 0, set()

    def createProgram(self, source, name, headers, includes):
        prog = object()
        self.live.add(prog)
        return prog

    def addNameExpression(self, prog, name):
        pass

    def compileProgram(self, prog, options):
        self.compiles += 1
        if self.compiles <= self.failures:
            raise self.NVRTCError("NVRTC_ERROR_COMPILATION")

    def getProgramLog(self, prog):
        return self.fail_log if self.compiles <= self.failures else ""

    def getLoweredName(self, prog, name):
        return name

    def getCUBIN(self, prog):
        return b"cubin"

    def getPTX(self, prog):
        return b"ptx\0"

    def destroyProgram(self, prog):
        self.live.discard(prog)


BUILTINS = "nvrtc: error: failed to open libnvrtc-builtins.so.13.0.\n  Make sure that libnvrtc-builtins.so.13.0 is installed correctly."


def test_nvrtc_failing_to_open_its_builtins_is_compiled_again_then_fsrs_fault_never_the_kernels(monkeypatch):
    """A compile whose NVRTC could not open its own builtins library (threads compiling at once)
    is made again; every time: CompilerUnavailable (fsr's fault), not CompileFailed (a kernel's
    COMPILE_ERROR). A kernel's own error is not retried. No program is left undestroyed."""
    from fsr.evaluate import compile as compile_module

    monkeypatch.setattr(compile_module, "BUILTINS_BACKOFF_S", 0.0)
    once = FlakyNvrtc(1, BUILTINS)
    monkeypatch.setattr(compile_module, "_library", lambda: once)
    got = compile_module.nvrtc("src", ("k",), ("--gpu-architecture=sm_90",))
    assert got.cubin == b"cubin" and once.compiles == 2 and not once.live

    always = FlakyNvrtc(99, BUILTINS)
    monkeypatch.setattr(compile_module, "_library", lambda: always)
    with pytest.raises(compile_module.CompilerUnavailable, match="could not open its builtins library"):
        compile_module.nvrtc("src", ("k",), ())
    assert always.compiles == compile_module.BUILTINS_ATTEMPTS and not always.live

    wrong = FlakyNvrtc(1, 'candidate.cu(3): error: identifier "x" is undefined')
    monkeypatch.setattr(compile_module, "_library", lambda: wrong)
    with pytest.raises(compile_module.CompileFailed, match="is undefined"):
        compile_module.nvrtc("src", ("k",), ())
    assert wrong.compiles == 1 and not wrong.live
