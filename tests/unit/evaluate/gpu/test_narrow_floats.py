"""The check and decoy kernels' conversions of bfloat16, float16 and fp8 (fsr.evaluate.gpu.narrow),
compiled for the host with the system's C++ compiler (the source is plain C): every code of each
format decodes to ml_dtypes' value, and floats (ties, subnormals, NaN) encode to ml_dtypes'
nearest-even code (float16 and fp8 saturating where ml_dtypes overflows)."""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from fsr.evaluate.gpu.narrow import LOW_PRECISION_SOURCE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

PRELUDE = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#define __device__
#define __forceinline__ inline
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
"""
MAIN = r"""
int main() {
    int kind; unsigned codes;
    std::scanf("%d %u", &kind, &codes);
    for (unsigned c = 0; c < codes; ++c) {  // decode every code
        unsigned u; float v;
        if (kind == 3) { fsr_bf16 b(0.0); b.bits = (unsigned short)c; v = b; }
        else v = fsr_narrow_float(c, kind);
        std::memcpy(&u, &v, 4);
        std::printf("%u\n", u);
    }
    unsigned bits;
    while (std::scanf("%u", &bits) == 1) {  // encode floats given by their bits
        float v; std::memcpy(&v, &bits, 4);
        const unsigned code = kind == 3 ? fsr_bf16(v).bits : fsr_narrow_bits(v, kind);
        std::printf("%u\n", code);
    }
}
"""
FORMATS = {0: ("float16", np.uint16), 1: ("float8_e4m3fn", np.uint8), 2: ("float8_e5m2", np.uint8),
           3: ("bfloat16", np.uint16)}


@pytest.fixture(scope="module")
def converter(tmp_path_factory):
    folder = tmp_path_factory.mktemp("narrow")
    (folder / "narrow.cpp").write_text(PRELUDE + LOW_PRECISION_SOURCE + MAIN)
    subprocess.run(["g++", "-O1", "-std=c++17", "-o", str(folder / "narrow"), str(folder / "narrow.cpp")], check=True)
    return folder / "narrow"


def run(converter, kind: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    name, code_type = FORMATS[kind]
    codes = 1 << (8 * np.dtype(code_type).itemsize)
    text = f"{kind} {codes}\n" + "\n".join(str(int(b)) for b in values.astype(np.float32).view(np.uint32))
    out = np.array(subprocess.run([str(converter)], input=text, capture_output=True, text=True, check=True)
                   .stdout.split(), dtype=np.uint64).astype(np.uint32)
    return out[:codes].view(np.float32), out[codes:].astype(code_type)


def probes(name: str, rng) -> np.ndarray:
    """Every finite value of the format, the midpoints between neighbours (ties), points just
    beside them, random floats over its range, its overflow, zeros and NaN."""
    codes = np.arange(1 << (8 * np.dtype(name).itemsize), dtype=np.uint64)
    with np.errstate(invalid="ignore"):
        finite = codes.astype(np.uint16 if np.dtype(name).itemsize == 2 else np.uint8).view(name).astype(np.float64)
    finite = np.unique(finite[np.isfinite(finite)])
    if finite.size > 4096:
        finite = rng.choice(finite, 4096, replace=False)
        finite.sort()
    middle = (finite[1:] + finite[:-1]) / 2
    top = float(finite.max())
    spread = rng.uniform(-top, top, 2000) * 10.0 ** rng.uniform(-6, 0, 2000)
    with np.errstate(over="ignore"):  # bfloat16's overflow is float32's: inf
        return np.concatenate([finite, middle, middle * (1 + 1e-6), middle * (1 - 1e-6), spread,
                               [0.0, -0.0, np.nan, top * 4, -top * 4]]).astype(np.float32)


@pytest.mark.parametrize("kind", sorted(FORMATS), ids=lambda k: FORMATS[k][0])
def test_every_code_decodes_to_ml_dtypes_value(converter, kind):
    name, code_type = FORMATS[kind]
    decoded, _ = run(converter, kind, np.zeros(0, np.float32))
    want = np.arange(decoded.size, dtype=np.uint64).astype(code_type).view(name).astype(np.float32)
    assert np.array_equal(decoded, want, equal_nan=True)


@pytest.mark.parametrize("kind", sorted(FORMATS), ids=lambda k: FORMATS[k][0])
def test_floats_encode_to_the_nearest_even_code(converter, kind):
    name, code_type = FORMATS[kind]
    values = probes(name, np.random.default_rng(kind))
    _, got = run(converter, kind, values)
    top = float(ml_dtypes.finfo(np.dtype(name)).max)
    want = (values if name == "bfloat16" else np.clip(values, -top, top)).astype(name)  # saturating
    got_values, want_values = got.view(name).astype(np.float64), want.astype(np.float64)
    assert np.array_equal(got_values, want_values, equal_nan=True)
    numbers = ~np.isnan(want_values)  # a NaN's sign is no value
    assert np.array_equal(np.signbit(got_values[numbers]), np.signbit(want_values[numbers]))


def test_a_decoy_spoils_low_precision_values_across_zero_and_others_beyond(tmp_path):
    """fsr_spoiled picks the mirrored step for the four narrow types (a step beyond v could
    saturate back onto v) and the plain one for every other type."""
    main = r"""
int main() {
    std::printf("%g %g %g %g %g %g\n", fsr_spoiled(1.0, 3.0, (fsr_bf16*)nullptr), fsr_spoiled(-1.0, 3.0, (fsr_f16*)nullptr),
                fsr_spoiled(1.0, 3.0, (fsr_e4m3*)nullptr), fsr_spoiled(1.0, 3.0, (fsr_e5m2*)nullptr),
                fsr_spoiled(1.0, 3.0, (float*)nullptr), fsr_spoiled(1.0, 3.0, (unsigned int*)nullptr));
}
"""
    (tmp_path / "spoil.cpp").write_text(PRELUDE + LOW_PRECISION_SOURCE + main)
    subprocess.run(["g++", "-std=c++17", "-o", str(tmp_path / "spoil"), str(tmp_path / "spoil.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "spoil")], capture_output=True, text=True, check=True).stdout.split()
    assert [float(v) for v in out] == [-2.0, 2.0, -2.0, -2.0, 4.0, 4.0]
