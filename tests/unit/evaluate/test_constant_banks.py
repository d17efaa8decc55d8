"""`__constant__` banks read from cubins NVRTC compiles here (no GPU): what certification restores
before every launch sequence (fsr.evaluate.gpu.strict), found from the cubin, one range per bank."""

from __future__ import annotations

from fsr import candidate, tasks
from fsr.evaluate import device_globals
from tests.adversarial.corpus import certification_channels
from tests.support.kernels import cubin

SOURCE = r"""
__constant__ float cst[8];
__constant__ int ci[3] = {7, 8, 9};
static __constant__ double sd[2] = {1.0, 2.0};
__constant__ const float* cp2 = cst;
__device__ unsigned counter;
extern "C" __global__ void k(float* y) {
    y[threadIdx.x] = cst[threadIdx.x & 7] + ci[threadIdx.x % 3] + sd[threadIdx.x & 1] + cp2[0];
    counter++;
}
"""


def test_every_constant_variable_is_found_in_its_bank_with_the_initial_image():
    banks = device_globals.constants(cubin(SOURCE))
    assert [s.name for s in banks.sections] == [".nv.constant3"]
    bank = banks.sections[0]
    offsets = {sym.name: (sym.offset, sym.size) for sym in bank.symbols}
    assert set(offsets) == {"cst", "ci", "sd", "cp2"} and offsets["cst"][1] == 32 and offsets["cp2"][1] == 8
    assert bank.image is not None and len(bank.image) == bank.size
    start = offsets["ci"][0]
    assert bank.image[start:start + 12] == bytes([7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0])
    assert all(sym.offset + sym.size <= bank.size for sym in bank.symbols)
    # kernel parameters (.nv.constant0.k) and __device__ variables are not constant banks
    assert "counter" not in banks.names() and device_globals.read(cubin(SOURCE)).names() == ["counter"]


def test_a_module_without_constants_has_no_bank():
    assert device_globals.constants(cubin('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }')).sections == ()


def test_a_bank_is_restored_whole_from_the_one_base_its_variables_agree_on():
    bank = device_globals.constants(cubin(SOURCE)).sections[0]
    base = 0x7F0000000000
    placed = {sym.name: base + sym.offset for sym in bank.symbols}
    assert device_globals.bank_span(bank, placed) == device_globals.Span(base, 0, bank.size)
    one = {"ci": placed["ci"]}  # one variable placed: the base still follows
    assert device_globals.bank_span(bank, one) == device_globals.Span(base, 0, bank.size)
    assert device_globals.bank_span(bank, {}) is None  # nothing placed: not restorable, never a guess
    assert device_globals.bank_span(bank, placed | {"ci": placed["ci"] + 256}) is None  # two bases


def test_the_corpus_constant_stash_keeps_its_table_in_a_bank_certification_restores(compiler):
    cheat, twin = next((c, t) for c, t in certification_channels() if "constant-restore" in c.caught_by)
    task = tasks.load(cheat.task)
    found = device_globals.constants(compiler.compile(candidate.parse(cheat.path.read_text(), task), "sm_90").cubin)
    assert {"KEYS", "STATS"} <= set(found.names()) and found.total_bytes >= 32 * 1024
    honest = device_globals.constants(compiler.compile(candidate.parse(twin.path.read_text(), task), "sm_90").cubin)
    assert honest.total_bytes == 0
