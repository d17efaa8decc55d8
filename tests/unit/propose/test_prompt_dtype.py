"""What a model is told of a low-precision task's device: its arithmetic floor at the measured
16-bit tensor-core rate, and the tensor-core instructions its arch compiles."""

from __future__ import annotations

from dataclasses import replace

from fsr.types import DeviceInfo


def test_the_prompt_states_the_floor_of_the_tasks_own_dtype():
    """A model reading a bfloat16 GEMM's prompt is told the time its flops take at the measured
    16-bit tensor-core rate, not at the float32 SGEMM rate (a floor 14x too high on an H100)."""
    from fsr import tasks
    from fsr.propose.prompt import floors

    h100 = DeviceInfo("H100", "sm_90", copy_gbps=3000.0, sgemm_tflops=51.7, half_tflops=720.0)
    bf16, sgemm = floors(tasks.load("gemm_bf16"), h100), floors(tasks.load("sgemm"), h100)
    assert "bfloat16 tensor-core GEMM rate take 1.53 ms" in bf16 and "SGEMM" not in bf16
    assert "measured SGEMM rate" in sgemm


def test_a_low_precision_tasks_prompt_names_the_tensor_core_instructions_of_the_arch():
    from fsr import tasks
    from fsr.propose.prompt import device_section

    h100 = DeviceInfo("H100", "sm_90", copy_gbps=3000.0, sgemm_tflops=51.7, half_tflops=720.0)
    bf16 = device_section(h100, tasks.load("gemm_bf16"))
    assert "Measured bfloat16 tensor-core GEMM rate 720 TFLOP/s" in bf16
    assert "mma.sync.aligned.m16n8k16" in bf16 and "e4m3" in bf16
    # fsr compiles an sm_90 device's candidates for sm_90a (also when the arch is named so)
    assert "wgmma.mma_async.sync.aligned.m64nNk16" in bf16 and "shared-memory matrix descriptor" in bf16
    assert "wgmma.mma_async" in device_section(replace(h100, arch="sm_90a"), tasks.load("gemm_bf16"))
    for arch in ("sm_80", "sm_89", "sm_100", "sm_120"):  # no wgmma before sm_90 or after it
        assert "wgmma" not in device_section(replace(h100, arch=arch), tasks.load("gemm_bf16")), arch
    assert "e4m3" not in device_section(DeviceInfo("A100", "sm_80", half_tflops=290.0), tasks.load("gemm_bf16"))
    assert "no bfloat16 tensor-core MMA" in device_section(DeviceInfo("V100", "sm_70"), tasks.load("gemm_bf16"))
    assert "mma.sync" not in device_section(h100, tasks.load("sgemm"))
