"""`fsr import --max-bench-bytes`: a file whose own sizes hold more arguments than a GPU worker can
keep is benchmarked at a smaller size that fits, found by halving the sizes that scale the problem
and checked on the meta device; and the float64 reference of a large size runs on CUDA where there
is one. On the CPU; needs torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fsr import cli, commands, expr, tasks
from fsr.commands import importer
from tests.support.paths import DATA

torch = pytest.importorskip("torch")

from fsr.kernelbench import DEFAULT_MAX_BENCH_BYTES, one, probe, runtime, scale  # noqa: E402
from fsr.kernelbench.plan import plan  # noqa: E402

RELU = DATA / "kernelbench" / "level1" / "19_ReLU.py"

POOL = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=kernel_size)

    def forward(self, x):
        return self.pool(x)

batch_size = 64
channels = 32
length = 65536
kernel_size = 16

def get_inputs():
    return [torch.rand(batch_size, channels, length)]

def get_init_inputs():
    return [kernel_size]
"""

# Its only size that scales is batch_size: one row of `kernel_size` floats in and out is 128 KiB.
ROWS = POOL.replace("return self.pool(x)", "return torch.relu(x)").replace(
    "channels = 32\nlength = 65536\nkernel_size = 16", "kernel_size = 16384").replace(
    "torch.rand(batch_size, channels, length)", "torch.rand(batch_size, kernel_size)")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def test_a_file_past_the_bound_is_benchmarked_at_halved_extents_and_structural_sizes_stay(tmp_path):
    path = write(tmp_path, "pool", POOL)
    result = one.import_one(path, tmp_path / "tasks", max_bench_bytes=4 * 2**20)
    assert result["ok"], result
    t = tasks.load(tmp_path / "tasks" / "pool")
    bench = dict(t.bench_size)
    assert bench["kernel_size"] == 16 and bench["length"] < 65536
    held = scale.argument_bytes(t.args, bench)
    assert 2 * 2**20 < held <= 4 * 2**20  # halved until it fits, no further
    assert expr.evaluate(t.bytes_expr, bench) == held
    shapes = probe.shapes(POOL, bench)  # the module at the scaled size has the task's shapes
    assert [tasks.shape_of(t, a, bench) for a in t.args] == [x.shape for x in shapes.inputs + shapes.outputs]
    toml = (tmp_path / "tasks" / "pool" / "task.toml").read_text()
    assert "# the file's own sizes, 570.4 MB of arguments, scaled down to fit --max-bench-bytes 4 MiB: " \
           "{ batch_size = 64, channels = 32, length = 65536, kernel_size = 16 }" in toml
    assert "scaled down to fit a GPU's memory" in t.description
    assert str(result["scaled"]).startswith("bench size scaled from ")
    assert str(result["scaled"]).endswith(" (570.4 MB of arguments; --max-bench-bytes 4 MiB)")


def test_the_import_line_says_the_file_size_and_0_keeps_it():
    fitted, kept = plan(RELU), plan(RELU, max_bench_bytes=0)
    assert fitted.bench == {"batch_size": 4096, "dim": 98304} and fitted.file_bench == kept.bench
    assert kept.bench == {"batch_size": 4096, "dim": 393216} and kept.scaled == ""
    assert expr.evaluate(kept.bytes_expr, kept.bench) == 2 * 4 * 4096 * 393216
    line = importer.result_line(RELU, "kb1_19_relu", {"ok": True, "tests": 6, "atol": 1e-6, "note": "",
                                                      "scaled": fitted.scaled})
    assert line == ("imported kb1_19_relu: 6 test sizes, atol 1e-06, bench size scaled from dim=393216 to "
                    "dim=98304 (12.9 GB of arguments; --max-bench-bytes 4 GiB)")
    assert DEFAULT_MAX_BENCH_BYTES == 4 * 2**30


def test_a_file_that_no_smaller_size_fits_is_skipped_with_why(tmp_path):
    path = write(tmp_path, "rows", ROWS)
    assert one.import_one(path, tmp_path / "tasks", max_bench_bytes=256 * 2**10)["ok"]  # two rows fit
    result = one.import_one(path, tmp_path / "tasks", max_bench_bytes=64 * 2**10)
    assert not result["ok"]
    assert result["reason"] == ("the arguments at the file's sizes hold 8.4 MB and no smaller benchmark size "
                                "within --max-bench-bytes 64 KiB runs")


def test_the_importer_never_runs_a_size_near_the_files_on_the_cpu(tmp_path, monkeypatch):
    """A file whose fixed sizes keep every variant large: no test size is run for values."""
    from fsr.kernelbench.plan import CPU_ELEMENTS

    path = write(tmp_path, "wide", ROWS.replace("kernel_size = 16384", f"kernel_size = {CPU_ELEMENTS}"))
    ran = []
    real = probe.values

    def values(*args):
        ran.append(args[2])
        return real(*args)

    monkeypatch.setattr(probe, "values", values)
    result = one.import_one(path, tmp_path / "tasks", max_bench_bytes=0)
    assert not result["ok"] and "too large to run on the CPU" in str(result["reason"]) and ran == []


@pytest.mark.parametrize(("elements", "cuda", "device"), [(2**22 + 1, True, "cuda"), (2**22 + 1, False, "cpu"),
                                                           (2**22, True, "cpu"), (2**10, False, "cpu")])
def test_the_reference_runs_on_cuda_only_when_large_and_available(monkeypatch, elements, cuda, device):
    arrays = {"x": np.broadcast_to(np.float32(0), (elements - 1,)), "w": np.zeros(1, np.float32)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert runtime.reference_device(arrays) == device
    used = []

    def forward64(namespace, layout, arrays, device):
        used.append(device)
        return [torch.zeros(1)]

    monkeypatch.setattr(runtime, "load", lambda source, sizes: {})
    monkeypatch.setattr(runtime, "forward64", forward64)
    assert list(runtime.reference64("", {"outputs": ["out"]}, arrays, {})) == ["out"]
    assert used == [device]  # the device is forward64's only difference


@pytest.mark.parametrize(("text", "value"), [("4GiB", 4 * 2**30), ("0", 0), ("512 MiB", 512 * 2**20),
                                             ("1.5GB", 1_500_000_000), ("1000", 1000)])
def test_max_bench_bytes_takes_units(text, value):
    assert importer.byte_count(text) == value


@pytest.mark.parametrize("text", ["-1", "lots", "4 XB", ""])
def test_a_bad_max_bench_bytes_is_one_line(capsys, text):
    try:
        code = cli.main(["import", str(RELU), "--max-bench-bytes", text])
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code == commands.EXIT_USAGE and err.count("\n") == 1 and "--max-bench-bytes" in err, err


DEPTHWISE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, groups=in_channels, bias=False)

    def forward(self, x):
        return self.conv2d(x)

batch_size = 8
in_channels = 16
out_channels = 16
kernel_size = 3
width = 32
height = 32

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""


def test_sizes_the_module_accepts_only_equal_stay_equal(tmp_path):
    """A depthwise convolution needs out_channels a multiple of in_channels (its group count)."""
    result = one.import_one(write(tmp_path, "depthwise", DEPTHWISE), tmp_path / "tasks")
    assert result["ok"], result
    t = tasks.load(tmp_path / "tasks" / "depthwise")
    assert all(dict(s)["in_channels"] == dict(s)["out_channels"] for s in t.test_sizes)
    assert len({dict(s)["in_channels"] for s in t.test_sizes}) >= 3 and any(dict(s)["in_channels"] % 2 for s in t.test_sizes)
    assert "out_channels equals in_channels at every size" in t.description


def test_equal_sizes_the_module_accepts_apart_are_not_tied():
    from fsr.kernelbench.plan import _ties

    dense = DEPTHWISE.replace(", groups=in_channels", "")
    assert _ties(dense, sizes_of(dense), probe.shapes(dense, sizes_of(dense))) == {}
    assert _ties(DEPTHWISE, sizes_of(DEPTHWISE), probe.shapes(DEPTHWISE, sizes_of(DEPTHWISE))) == {"out_channels": "in_channels"}


def sizes_of(source):
    from fsr.kernelbench import sizes

    return sizes.constants(source)


def test_the_listing_gist_is_the_models_first_docstring_sentence():
    from fsr.kernelbench.write import gist

    source = 'class Model:\n    """Simple model that performs a ReLU: fast. More text."""\n'
    assert gist(source) == "Simple model that performs a ReLU, fast"
    assert gist("class Model:\n    pass\n") == "" and gist("class Other:\n    '''Doc.'''\n") == ""
    assert gist("def broken(:\n") == ""


def test_byte_counts_read_as_a_person_writes_them():
    from fsr.types import bytes_text

    assert [bytes_text(n) for n in (4 * 2**30, 300 * 2**20, 3 * 2**29, 2048, 100)] == \
        ["4 GiB", "300 MiB", "1.5 GiB", "2 KiB", "100 bytes"]
