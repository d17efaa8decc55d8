"""Turning raw samples into a Timing, and judging whether it is physically possible.

No cupy here: this runs in the parent, which never touches CUDA.
"""

from __future__ import annotations

import numpy as np

from fsr.config import EvalConfig
from fsr.dtypes import LOW_PRECISION, flop_ceiling
from fsr.types import DeviceInfo, Timing


def summarise(samples_us: list[float], bytes_moved: float, flops: float, device: DeviceInfo,
              dtype: str = "float32") -> Timing:
    """Median, quantiles and roofline figures of raw samples (against the ceilings of `dtype`)."""
    arr = np.asarray(samples_us, dtype=np.float64)
    median = float(np.median(arr))
    gbps = bytes_moved / (median * 1e-6) / 1e9
    tflops = flops / (median * 1e-6) / 1e12
    ceiling = flop_ceiling(device, dtype)
    fractions = [gbps / device.copy_gbps if device.copy_gbps else 0.0, tflops / ceiling if ceiling else 0.0]
    return Timing(median_us=median, p10_us=float(np.quantile(arr, 0.1)), p90_us=float(np.quantile(arr, 0.9)),
                  min_us=float(arr.min()), samples_us=tuple(float(x) for x in arr), gbps=gbps, tflops=tflops,
                  ceiling_fraction=max(fractions))


def implausible(timing: Timing, device: DeviceInfo, cfg: EvalConfig, dtype: str = "float32") -> str | None:
    """Why a timing is faster than the device can go, or None. `dtype`: the task's (its outputs')."""
    gbps = max(device.copy_gbps, device.read_gbps)  # a kernel that mostly reads may pass the copy rate
    if gbps and timing.gbps > cfg.plausibility_margin * gbps:
        return (f"{timing.gbps:.0f} GB/s is above the measured memory ceiling of {gbps:.0f} GB/s (copy "
                f"{device.copy_gbps:.0f}, read {device.read_gbps:.0f}): the kernel cannot have moved the task's bytes")
    if dtype in LOW_PRECISION:
        flops = flop_ceiling(device, dtype)
        if flops and timing.tflops > cfg.plausibility_margin * flops:
            return (f"{timing.tflops:.1f} TFLOP/s is above the measured {dtype} tensor-core ceiling "
                    f"({flops:.1f} TFLOP/s): the kernel cannot have done the task's arithmetic")
        return None
    # float32 arithmetic at most at the library SGEMM's rate on the CUDA cores, or a third of the
    # TF32 MMA rate on the tensor cores (split TF32, the cheapest float32-accurate product there)
    flops = max(device.sgemm_tflops, device.tensor_tflops / 3)
    if flops and timing.tflops > cfg.plausibility_margin * flops:
        tensor = f", a third of the TF32 tensor-core rate {device.tensor_tflops / 3:.1f}" if device.tensor_tflops else ""
        return (f"{timing.tflops:.1f} TFLOP/s is above the measured float32 ceiling (SGEMM "
                f"{device.sgemm_tflops:.1f} TFLOP/s{tensor}): the kernel cannot have done the task's arithmetic")
    return None
