"""The bf16 emulation tests' shared part: tests/data/bf16_emulation/emulate.h's scheduler and
launch, compiled by g++ once a session; each emulated program links it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import DATA

EMULATION_HEADER = DATA / "bf16_emulation" / "emulate.h"


@pytest.fixture(scope="session")
def emulation_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The object file of emulate.h with EMULATE_IMPLEMENTATION defined."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed to build the emulation")
    obj = tmp_path_factory.mktemp("bf16-emulation") / "emulate.o"
    subprocess.run(["g++", "-O1", "-std=c++17", "-w", "-c", "-x", "c++", "-DEMULATE_IMPLEMENTATION",
                    "-o", str(obj), str(EMULATION_HEADER)], check=True)
    return obj
