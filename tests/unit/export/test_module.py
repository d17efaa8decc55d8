"""fsr export's module without a GPU: its text for the softmax and gemm_bf16 baselines and
templates, imported where fsr, cupy and torch cannot be; its launch plans and scratch against
fsr's own at many sizes; sizes read from shapes and arguments checked; the kernel compiled by
the module to the very cubin fsr compiles; nothing of a header but arithmetic reaching the code."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from fsr import candidate as cfmt
from fsr import dtypes, expr, tasks
from fsr.commands.launch import error_ratio
from fsr.evaluate import compile as compiler
from fsr.export import checks, runtime
from fsr.export.module import ExportError, Provenance, module_text
from fsr.types import LaunchSpec
from tests.support.paths import DATA

EXPORTS = [("softmax", "baseline"), ("softmax", "template"), ("gemm_bf16", "baseline"), ("gemm_bf16", "template"),
           ("scan", "template"), ("spmv_csr", "baseline"), ("histogram", "baseline")]
# What an exported module may import: at its top, the standard library and numpy; inside the
# functions that need them, cupy (and its NVRTC binding), torch and ml_dtypes. Never fsr.
TOP_LEVEL = {"__future__", "struct", "dataclasses", "importlib", "os", "re", "threading", "types", "math",
             "collections", "pathlib", "typing", "numpy"}
LAZY = {"cupy", "cupy_backends", "torch", "ml_dtypes"}


def exported(name: str, which: str, tuned: dict[str, int] | None = None) -> tuple[tasks.Task, cfmt.Candidate, str]:
    task = tasks.load(name)
    cand = cfmt.parse(getattr(task, f"{which}_source"), task)
    cand = cfmt.with_defines(cand, tuned) if tuned else cand
    return task, cand, module_text(task, cand, Provenance(f"tasks/{name}/{which}.cu"), f"{name}_{which}")


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports")
    for name, which in EXPORTS:
        (out / f"{name}_{which}.py").write_text(exported(name, which)[2])
    return out


def test_the_module_imports_only_the_standard_library_and_numpy_at_its_top_and_never_fsr(folder: Path):
    for name, which in EXPORTS:
        tree = ast.parse((folder / f"{name}_{which}.py").read_text())
        top = {n for node in tree.body for n in _imported(node)}
        assert top <= TOP_LEVEL, (name, which, top - TOP_LEVEL)
        every = {n for node in ast.walk(tree) for n in _imported(node)}
        assert every - top <= LAZY and "fsr" not in every, (name, which, every)


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [(node.module or "").split(".")[0]]
    return []


def fsr_plan(cand: cfmt.Candidate, size: dict[str, int]) -> list[tuple]:
    """What fsr launches at this size: (kernel, grid, block, smem bytes) of each launch that runs there."""
    return [(launch.kernel, *dims) for launch, dims in cfmt.launches_at(cand, size)]


def fsr_scratch(cand: cfmt.Candidate, size: dict[str, int]) -> dict[str, int]:
    """The bytes of each scratch buffer fsr allocates at this size (one element at least)."""
    counts = cfmt.scratch_counts(cand, size)
    return {s.name: max(counts[s.name], 1) * dtypes.numpy_dtype(s.dtype).itemsize for s in cand.scratch}


PROBE = r"""
import importlib, json, sys
BLOCKED = ("fsr", "cupy", "cupy_backends", "torch", "ml_dtypes")
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} is not installed here")
sys.meta_path.insert(0, Blocker())
out = {}
for name, sizes in json.loads(sys.argv[1]).items():
    m = importlib.import_module(name)
    out[name] = [[m.launch_plan(**s), m.KERNEL.scratch_bytes(s)] for s in sizes]
out["loaded"] = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
print(json.dumps(out))
"""


def test_launch_plans_and_scratch_match_fsrs_at_every_size_where_fsr_cupy_and_torch_cannot_be_imported(folder):
    rng = np.random.default_rng(0)
    wanted, sizes = {}, {}
    for name, which in EXPORTS:
        task, cand, _ = exported(name, which)
        chosen = [dict(s) for s in (*task.test_sizes, task.bench_size)]
        chosen += [{n: int(rng.integers(1, 5000)) for n in task.size_names} for _ in range(5)]
        sizes[f"{name}_{which}"] = chosen
        wanted[f"{name}_{which}"] = [[fsr_plan(cand, s), fsr_scratch(cand, s)] for s in chosen]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(sizes)], cwd=folder, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got.pop("loaded") == []
    assert got == json.loads(json.dumps(wanted))  # tuples as JSON lists
    assert any(entry[1] for entry in got["scan_template"])  # scratch was compared, not only absent


def test_tuned_values_are_baked_into_the_source_and_the_plan(tmp_path: Path):
    task, cand, text = exported("gemm_bf16", "template", {"WARPS_M": 4, "BK": 32, "SWIZZLE": 1})
    (tmp_path / "gemm_tuned.py").write_text(text)
    m = load(tmp_path / "gemm_tuned.py")
    assert "#define WARPS_M 4\n" in m.SPEC.source and "#define SWIZZLE 1\n" in m.SPEC.source
    size = {"M": 1000, "N": 3000, "K": 77}
    assert m.launch_plan(**size) == fsr_plan(cand, size)
    _, default, _ = exported("gemm_bf16", "template")
    assert cfmt.launch_dims(default, size) != cfmt.launch_dims(cand, size)  # the tuned values matter here


def test_a_launch_runs_where_its_when_holds_and_one_that_takes_a_tensor_map_is_refused(tmp_path: Path):
    # gemm_bf16's template with WGMMA on: the mma.sync launch where K or N is no multiple of 8, the
    # wgmma launch (tensor maps, which only fsr's evaluator encodes) elsewhere
    task, cand, text = exported("gemm_bf16", "template", {"WGMMA": 1})
    (tmp_path / "gemm_wgmma.py").write_text(text)
    m = load(tmp_path / "gemm_wgmma.py")
    ragged = {"M": 33, "N": 65, "K": 17}
    assert m.launch_plan(**ragged) == fsr_plan(cand, ragged) and len(m.launch_plan(**ragged)) == 1
    with pytest.raises(ValueError, match=r"gemm_bf16_wgmma at M=77,N=136,K=72 takes a_tiles, b_tiles, a tensor map"):
        m.launch_plan(M=77, N=136, K=72)


def test_sizes_are_read_from_shapes_and_every_argument_is_checked(folder: Path):
    m = load(folder / "spmv_csr_baseline.py")
    k = m.KERNEL
    shapes = {"row_ptr": (11,), "col_idx": (40,), "vals": (40,), "x": (7,)}
    assert k.sizes(shapes, {}) == {"rows": 10, "cols": 7, "nnz": 40}  # rows from row_ptr's rows + 1
    assert k.sizes(shapes, {"cols": 9}) == {"rows": 10, "cols": 9, "nnz": 40}
    with pytest.raises(ValueError, match=r"x: shape \(7,\), expected \(9,\)"):
        k.check_arg(k.inputs[3], (7,), {"rows": 10, "cols": 9, "nnz": 40}, True, "float32", True)
    with pytest.raises(TypeError, match="x: dtype float64, expected float32"):
        k.check_arg(k.inputs[3], (7,), {"rows": 10, "cols": 7, "nnz": 40}, False, "float64", True)
    with pytest.raises(ValueError, match="not contiguous"):
        k.check_arg(k.inputs[3], (7,), {"rows": 10, "cols": 7, "nnz": 40}, True, "float32", False)
    for bad in (0, -3, 2**31, True, 2.5):
        with pytest.raises(ValueError, match="size cols must be an integer"):
            k.sizes(shapes, {"cols": bad})
    h = load(folder / "histogram_baseline.py").KERNEL
    with pytest.raises(ValueError, match="size bins is read from no argument's shape here: pass bins="):
        h.sizes({"x": (100,)}, {})  # bins only from the output's shape
    assert h.sizes({"x": (100,), "counts": (7,)}, {}) == {"n": 100, "bins": 7}


def test_a_header_expression_that_gives_no_launch_is_named(tmp_path: Path):
    task = tasks.load("softmax")
    cand = cfmt.parse(task.baseline_source, task)
    odd = dataclasses.replace(cand, launches=(dataclasses.replace(cand.launches[0], grid=("rows - 5",),
                                                                  block=("rows / 2",)),))
    (tmp_path / "odd.py").write_text(module_text(task, odd, Provenance("odd.cu"), "odd"))
    m = load(tmp_path / "odd.py")
    with pytest.raises(ValueError, match=r"expression 'rows / 2' at rows=3,cols=7,BLOCK=256: not a whole number \(1.5\)"):
        m.launch_plan(rows=3, cols=7)
    with pytest.raises(ValueError, match="is not a valid launch"):
        m.launch_plan(rows=4, cols=7)  # grid -1
    assert m.launch_plan(rows=8, cols=7)[0][1:3] == ((3,), (4,))


def test_only_arithmetic_of_a_header_reaches_the_module():
    task = tasks.load("softmax")
    cand = cfmt.parse(task.baseline_source, task)
    evil = dataclasses.replace(cand, launches=(LaunchSpec("softmax_rows", ("__import__('os').system('true')",),
                                                          ("256",), ("x", "y", "rows", "cols")),))
    with pytest.raises(expr.ExprError, match="unsupported syntax"):
        module_text(task, evil, Provenance("evil.cu"))
    named = dataclasses.replace(task, args=(dataclasses.replace(task.args[0], name="x-in"), task.args[1]))
    with pytest.raises(ExportError, match="'x-in' are not Python names"):
        module_text(named, cand, Provenance("x.cu"))


def test_a_source_with_quotes_and_backslashes_is_carried_exactly(tmp_path: Path):
    task = tasks.load("softmax")
    cand = cfmt.parse(task.baseline_source, task)
    odd = dataclasses.replace(cand, source=cand.source + "\n// ''' \"\"\" \\\r\n// ends in a quote'")
    (tmp_path / "quoted.py").write_text(module_text(task, odd, Provenance("q.cu"), "quoted"))
    assert load(tmp_path / "quoted.py").SPEC.source == compiler.full_source(odd)


def test_the_module_compiles_the_cubin_fsr_compiles(folder: Path):
    service = compiler.CompileService()
    for name in ("softmax_template", "gemm_bf16_template"):
        m = load(folder / f"{name}.py")
        task, cand, _ = exported(*name.rsplit("_", 1))
        cubin, symbols = runtime.compile_cubin(m.SPEC, "sm_90")
        fsr_compiled = service.compile(cand, "sm_90")
        assert cubin == fsr_compiled.cubin and symbols == dict(fsr_compiled.lowered)


def test_code_only_the_arch_variant_assembles_compiles_for_it(tmp_path: Path):
    task = tasks.load("gemm_bf16")
    wgmma = DATA / "wgmma" / "gemm_bf16_wgmma.cu"
    cand = cfmt.parse(wgmma.read_text(), task)
    (tmp_path / "wgmma.py").write_text(module_text(task, cand, Provenance(str(wgmma)), "wgmma"))
    m = load(tmp_path / "wgmma.py")
    cubin, _ = runtime.compile_cubin(m.SPEC, "sm_90")
    assert cubin == compiler.CompileService().compile(cand, "sm_90").cubin
    with pytest.raises(runtime.CompileError, match="not supported on .target 'sm_90'"):
        runtime._nvrtc(m.SPEC, "sm_90")  # the plain arch refuses it: the variant was needed


def test_the_module_finds_headers_and_variants_as_fsr_does():
    assert runtime.include_dirs() == compiler.include_dirs()
    for arch in ("sm_75", "sm_80", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"):
        assert runtime.variant_arch(arch) == compiler.target_arch(arch)


def test_the_check_holds_outputs_to_fsrs_tolerance_and_reference(folder: Path):
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(50, 30)) * np.where(rng.random((50, 30)) < 0.2, 0.0, 1.0)
    for tol in (dtypes.Tolerance(1e-7, 1e-4), dtypes.Tolerance(0.0, 1e-2, 1.0), dtypes.Tolerance(0.5, 1e-12)):
        assert np.array_equal(checks.bounds(ref, tol.atol, tol.rtol, tol.floor), dtypes.bounds(ref, tol))
        for got in (ref + 1e-5, ref * 1.001, np.where(ref == 0, 1e-9, ref), np.full_like(ref, np.nan)):
            assert checks.error_ratio(got, ref, (tol.atol, tol.rtol, tol.floor)) == error_ratio(got, ref, tol)
    m = load(folder / "gemm_bf16_template.py")
    task = tasks.load("gemm_bf16")
    assert m.SPEC.reference_source == task.reference_source  # embedded: runs where the task folder is not
    size = {"M": 5, "N": 8, "K": 8}
    inputs = checks.reference_module(m.KERNEL).make_inputs(size, np.random.default_rng(3))
    want = tasks.functions(task).reference(inputs, size)["C"]
    assert np.array_equal(checks.reference_module(m.KERNEL).reference(inputs, size)["C"], want)


def test_the_copied_modules_define_each_name_once():
    from fsr.export.module import EMBEDDED, PUBLIC

    names: list[str] = []
    for module in EMBEDDED:
        tree = ast.parse(Path(module.__file__).read_text())
        names += [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                  if isinstance(t, ast.Name)]
        names += [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)]
    assert len(names) == len(set(names)) and not set(names) & set(PUBLIC)
