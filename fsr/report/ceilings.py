"""The measured ceiling each task's roofline fraction used, read from the lineage and run.json.

The judge takes a kernel's roofline fraction against whichever of the device's measured copy
bandwidth and arithmetic rate (SGEMM for float32, the 16-bit tensor-core GEMM for bfloat16 and
float16, twice that for fp8) gives the larger fraction, and the lineage keeps the fraction, not
the ceiling. A kernel's rate over its fraction is the ceiling that bound it, exactly, and at most
the other one; every kernel of a task has the task's bytes and FLOPs, so all bind alike. Over a
run's tasks on one device, then, the largest implied copy rate is the copy bandwidth, and the
largest implied arithmetic rate of a dtype is that dtype's ceiling, when some task of the run was
bound by each. A task the run's figures cannot settle (the only one of its device, say) is named
by both ceilings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from fsr.dtypes import flop_ceiling
from fsr.report.tables import timed_ok
from fsr.types import DeviceInfo

MEMORY = "copy bandwidth"
SGEMM = "SGEMM rate"  # float32 tasks, and tasks of a lineage from before the dtype column
ARITHMETIC = {"bfloat16": "bf16 tensor-core rate", "float16": "fp16 tensor-core rate",
              "float8_e4m3fn": "fp8 tensor-core rate", "float8_e5m2": "fp8 tensor-core rate"}
SAME = 1e-3  # two implied ceilings this close (relative) are one measured figure
CEILING_COLUMNS = ["task", "bound", "ceiling"]


def arithmetic_name(dtype: object) -> str:
    """The arithmetic ceiling a task judged in `dtype` is measured against."""
    return ARITHMETIC.get(str(dtype), SGEMM)


def ceiling_name(bound: str, dtype: object) -> str:
    """The ceiling's name for a bound of "memory", "arithmetic" or "" (not settled: both)."""
    arithmetic = arithmetic_name(dtype)
    return {"memory": MEMORY, "arithmetic": arithmetic}.get(bound, f"{MEMORY} or {arithmetic}")


def _measured(devices: object) -> dict[str, DeviceInfo]:
    """run.json's `devices` (name and measured ceilings each) by name; {} where it records none."""
    out = {}
    for d in devices if isinstance(devices, list) else []:
        if isinstance(d, Mapping) and d.get("name") and d.get("copy_gbps"):
            rate = {k: float(d.get(k) or 0.0) for k in ("copy_gbps", "sgemm_tflops", "half_tflops")}
            out[str(d["name"])] = DeviceInfo(name=str(d["name"]), arch=str(d.get("arch", "")),
                                             copy_gbps=rate["copy_gbps"], sgemm_tflops=rate["sgemm_tflops"],
                                             half_tflops=rate["half_tflops"])
    return out


def ceilings(frame: pd.DataFrame, info: Mapping[str, Any]) -> pd.DataFrame:
    """Per task with a timed kernel: `bound` ("memory", "arithmetic", or "" where the run's figures
    cannot tell) and `ceiling`, the name of what its roofline fraction is measured against."""
    ok = timed_ok(frame)
    ok = ok[(ok["ceiling_fraction"] > 0) & ok["gbps"].notna() & ok["tflops"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=CEILING_COLUMNS)
    dtype = ok["dtype"].fillna("") if "dtype" in ok else pd.Series("", index=ok.index)
    rows = ok.assign(copy=ok["gbps"] / ok["ceiling_fraction"], flops=ok["tflops"] / ok["ceiling_fraction"],
                     kind=dtype.map(arithmetic_name), dtype=dtype)
    per = rows.groupby("task").agg(device=("device", "last"), kind=("kind", "last"), dtype=("dtype", "last"),
                                   copy=("copy", "median"), flops=("flops", "median"), gbps=("gbps", "median"),
                                   tflops=("tflops", "median"))
    measured = _measured(info.get("devices"))
    out = []
    for task, r in per.iterrows():
        device = measured.get(r["device"])
        if device is not None and flop_ceiling(device, r["dtype"] or "float32"):
            arithmetic = r["tflops"] / flop_ceiling(device, r["dtype"] or "float32")
            bound = "memory" if r["gbps"] / device.copy_gbps >= arithmetic else "arithmetic"
        else:
            mates = per[per["device"] == r["device"]]
            at_copy = r["copy"] >= mates["copy"].max() * (1 - SAME)
            at_flops = r["flops"] >= mates.loc[mates["kind"] == r["kind"], "flops"].max() * (1 - SAME)
            bound = "memory" if at_copy and not at_flops else "arithmetic" if at_flops and not at_copy else ""
        out.append({"task": task, "bound": bound, "ceiling": ceiling_name(bound, r["dtype"])})
    return pd.DataFrame(out, columns=CEILING_COLUMNS)


def rate_text(gbps: object, tflops: object, bound: object) -> str:
    """A kernel's rate as its ceiling counts it: GB/s when memory binds, TFLOP/s when arithmetic
    does, both where that is not settled; "" with no rate."""
    parts = []
    if bound != "arithmetic" and isinstance(gbps, float) and gbps == gbps:
        parts.append(f"{gbps:,.0f} GB/s")
    if bound != "memory" and isinstance(tflops, float) and tflops == tflops:
        parts.append(f"{tflops:,.3g} TFLOP/s")
    return ", ".join(parts)
