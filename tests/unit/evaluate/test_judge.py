"""The plausibility bound: a timing faster than the device can go is SUSPECT, and a float32
product on the tensor cores (split TF32) is not held to the CUDA cores' SGEMM rate."""

from __future__ import annotations

from fsr.config import EvalConfig
from fsr.evaluate.judge import implausible, summarise
from fsr.types import DeviceInfo

H200 = DeviceInfo("H200", "sm_90", copy_gbps=4200.0, sgemm_tflops=51.0, tensor_tflops=360.0)
FLOPS = 2 * 4096**3  # an SGEMM at 4096^3
BYTES = 4 * 3 * 4096**2


def at(us: float, device: DeviceInfo = H200, nbytes: float = BYTES, flops: float = FLOPS) -> str | None:
    return implausible(summarise([us] * 5, nbytes, flops, device), device, EvalConfig())


def test_an_sgemm_faster_than_the_library_on_the_tensor_cores_is_plausible():
    assert at(2700.0) is None  # cuBLAS's rate
    assert at(2350.0) is None  # 58 TFLOP/s: split TF32 on an H200, 1.14x cuBLAS
    assert at(1100.0) is None  # 125 TFLOP/s: a third of the TF32 rate, within the margin


def test_faster_than_a_third_of_the_tf32_rate_is_suspect():
    reason = at(1000.0)  # 137 TFLOP/s
    assert reason and "TFLOP/s is above the measured float32 ceiling" in reason and "TF32" in reason


def test_without_tensor_cores_the_library_sgemm_bounds_the_rate():
    old = DeviceInfo("V100", "sm_70", copy_gbps=800.0, sgemm_tflops=14.0)
    assert at(10000.0, old) is None  # 13.7 TFLOP/s
    reason = at(8000.0, old)  # 17.2 TFLOP/s
    assert reason and "SGEMM 14.0 TFLOP/s" in reason and "TF32" not in reason


def test_bytes_moved_faster_than_the_measured_ceiling_are_suspect():
    assert at(40.0, nbytes=1 << 27, flops=0) is None  # 3.4 TB/s
    assert "memory ceiling of 4200 GB/s" in at(25.0, nbytes=1 << 27, flops=0)  # 5.4 TB/s


def test_a_kernel_that_mostly_reads_is_held_to_the_read_rate():
    reads = DeviceInfo("H200", "sm_90", copy_gbps=4200.0, read_gbps=4600.0)
    assert at(28.0, reads, nbytes=1 << 27, flops=0) is None  # 4.8 TB/s: above 1.1x copy, below 1.1x read
    assert "memory ceiling of 4600 GB/s" in at(25.0, reads, nbytes=1 << 27, flops=0)  # 5.4 TB/s


def test_a_bf16_gemm_on_the_tensor_cores_is_held_to_the_16_bit_rate_not_sgemm():
    """A bfloat16 8192^3 product at 390 TFLOP/s (a tensor-core template on an H100) is plausible
    against the 16-bit ceiling, where the float32 ceiling judged it SUSPECT; past the 16-bit
    ceiling it is SUSPECT; fp8 is held to twice it; float32 keeps its own bound."""
    h100 = DeviceInfo("H100", "sm_90", copy_gbps=3000.0, sgemm_tflops=51.7, tensor_tflops=316.0, half_tflops=720.0)
    flops, nbytes = 2 * 8192**3, 2 * 3 * 8192**2

    def judged(us: float, dtype: str) -> str | None:
        timing = summarise([us] * 5, nbytes, flops, h100, dtype)
        return implausible(timing, h100, EvalConfig(), dtype)

    assert judged(2820.0, "bfloat16") is None  # 390 TFLOP/s
    assert "float32 ceiling" in judged(2820.0, "float32")
    assert "bfloat16 tensor-core ceiling (720.0" in judged(1300.0, "bfloat16")  # 846 TFLOP/s
    assert judged(1300.0, "float8_e4m3fn") is None and judged(600.0, "float8_e4m3fn")  # 1833 TFLOP/s
    assert summarise([2820.0] * 5, nbytes, flops, h100, "bfloat16").ceiling_fraction < 0.6
    unmeasured = DeviceInfo("V100", "sm_70", copy_gbps=800.0, sgemm_tflops=14.0)
    assert implausible(summarise([2820.0] * 5, nbytes, flops, unmeasured, "float16"), unmeasured, EvalConfig(),
                       "float16") is None  # no 16-bit ceiling measured: no flop bound

