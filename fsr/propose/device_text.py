"""What a model is told about the GPU: the card's properties and the ceilings its worker measured
(copy and read bandwidth, SGEMM, the tensor-core rates), each figure said only where it was
measured; for a low-precision task, the tensor-core instructions its arch compiles; and, in the
task's section, what physics allows at the benchmark size on that card.
"""

from __future__ import annotations

import re

from fsr import dtypes, tasks
from fsr.dtypes import LOW_PRECISION, flop_ceiling
from fsr.evaluate.compile import target_arch
from fsr.propose.render import fill, format_bytes, format_us
from fsr.types import DeviceInfo, Task

TF32_NOTE = "float32-accurate split TF32, three MMAs a product, reaches a third of it"


def device_section(device: DeviceInfo, task: Task) -> str:
    """The GPU paragraph: the card's properties, then its measured ceilings (or that none were)."""
    return fill("device.md", name=device.name, arch=device.arch, sm_count=device.sm_count or "?",
                smem_per_block=format_bytes(device.smem_per_block),
                smem_optin=format_bytes(device.smem_per_block_optin),
                smem_per_sm=format_bytes(device.smem_per_sm), l2=format_bytes(device.l2_bytes),
                regs_per_sm=device.regs_per_sm or "?", measured=measured(device),
                low=tensor_cores(device, task)) + tensor_maps(device)


def tensor_maps(device: DeviceInfo) -> str:
    """How to ask for a tensor map, on a device with the tensor memory accelerator (sm_90 on)."""
    m = re.fullmatch(r"sm_(\d+)[af]?", device.arch)
    return "\n" + fill("tensormap.md") if m and int(m.group(1)) >= 90 else ""


def measured(device: DeviceInfo) -> str:
    """The ceilings this card's worker measured, as a sentence; where none was, a sentence saying so."""
    figures = [f"copy bandwidth {device.copy_gbps:.0f} GB/s (bytes read plus written)" if device.copy_gbps else "",
               f"streaming read bandwidth {device.read_gbps:.0f} GB/s" if device.read_gbps else "",
               f"SGEMM rate {device.sgemm_tflops:.1f} TFLOP/s" if device.sgemm_tflops else "",
               f"TF32 tensor-core MMA rate {device.tensor_tflops:.0f} TFLOP/s ({TF32_NOTE})" if device.tensor_tflops else ""]
    said = "; ".join(f for f in figures if f)
    return f"Measured on this card: {said}." if said else "Its bandwidth and arithmetic rates were not measured."


# wgmma exists on sm_90a only (sm_100a's tensor cores take tcgen05 instead), which fsr compiles an
# sm_90 device's candidates for (fsr.evaluate.compile.target_arch).
WGMMA = ("wgmma.mma_async.sync.aligned.m64nNk16 (N 8 to 256 by 8, one warpgroup of 128 threads; A from "
         "registers or a shared-memory matrix descriptor, B from a descriptor; bf16/f16 in, f32 accumulate; "
         "m64nNk32 for e4m3/e5m2) with wgmma.fence, commit_group and wait_group, and fence.proxy.async after "
         "writing its shared-memory operands; setmaxnreg")


def tensor_cores(device: DeviceInfo, task: Task) -> str:
    """For a task judged in a 16- or 8-bit float: its measured tensor-core rate and the
    instructions NVRTC compiles for this device's arch (wgmma on sm_90, which fsr compiles for
    as sm_90a); "" for other tasks."""
    if task.dtype not in dtypes.LOW_PRECISION:
        return ""
    m = re.fullmatch(r"sm_(\d+)[af]?", device.arch)
    cc = int(m.group(1)) if m else 0
    rate = flop_ceiling(device, task.dtype)
    said = f" Measured {task.dtype} tensor-core GEMM rate {rate:.0f} TFLOP/s." if rate else ""
    if cc < 80:
        return said + " This arch has no bfloat16 tensor-core MMA."
    ops = ["mma.sync.aligned.m16n8k16 (bf16/f16 in, f32 accumulate)", "ldmatrix", "cp.async"]
    if cc >= 89:
        ops.insert(1, "mma.sync.aligned.m16n8k32 with e4m3/e5m2")
    if target_arch(device.arch) == "sm_90a":
        ops.insert(0, WGMMA)
    return said + f" Tensor-core instructions this arch compiles: {'; '.join(ops)}; `mma.h` (wmma) too."


def floors(task: Task, device: DeviceInfo) -> str:
    """What physics allows at the benchmark size on this device, as a sentence ("" if unknown)."""
    sizes = dict(task.bench_size)
    parts = []
    if device.copy_gbps:
        us = tasks.bytes_moved(task, sizes) / (device.copy_gbps * 1e9) * 1e6
        parts.append(f"moving its {format_bytes(int(tasks.bytes_moved(task, sizes)))} at the measured copy "
                     f"bandwidth takes {format_us(us)}")
    ceiling = flop_ceiling(device, task.dtype)
    if ceiling and tasks.flops(task, sizes):
        us = tasks.flops(task, sizes) / (ceiling * 1e12) * 1e6
        rate = f"{task.dtype} tensor-core GEMM rate" if task.dtype in LOW_PRECISION else "SGEMM rate"
        parts.append(f"its flops at the measured {rate} take {format_us(us)}")
    return ("At the benchmark size " + "; ".join(parts) + ".") if parts else ""
