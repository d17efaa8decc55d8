"""The element types a task's buffers and a candidate's scratch may have, and what each means on
the host, on the device and in the checks.

NumPy has no bfloat16 or fp8: `ml_dtypes` gives them (importing it registers their names, so
`np.dtype("bfloat16")` works once this module is imported). CuPy has neither: such a buffer lives
on the device as raw bytes, copied up and down as a same-width unsigned integer view
(`device_dtype`) and read back with `host_view`.

Tolerances: an output element passes when |out - ref| <= atol + rtol * max(|ref|, floor * m),
ref in float64 and m the mean |ref| over that output (`bounds`). float32 tasks give atol and rtol
and no floor, which is the rule they always had; low-precision outputs default to a relative
tolerance with a magnitude floor (`default_tolerance`), so that an output of zeros, or one scaled
down, never passes however small the op's outputs are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes  # noqa: F401  # registers bfloat16 and the fp8 types with NumPy
import numpy as np

if TYPE_CHECKING:
    from fsr.types import DeviceInfo

LOW_PRECISION = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
DTYPES = frozenset({"float32", "float64", "int32", "int64", "uint32", "int8", "uint8", *LOW_PRECISION})
FLOAT = frozenset({"float32", "float64", *LOW_PRECISION})

# C type a kernel declares for a buffer of this dtype (cuda_bf16.h, cuda_fp16.h, cuda_fp8.h).
C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long",
           "uint32": "unsigned int", "uint8": "unsigned char", "int8": "signed char",
           "bfloat16": "__nv_bfloat16", "float16": "__half", "float8_e4m3fn": "__nv_fp8_e4m3",
           "float8_e5m2": "__nv_fp8_e5m2"}
HEADERS = {"bfloat16": "cuda_bf16.h", "float16": "cuda_fp16.h", "float8_e4m3fn": "cuda_fp8.h",
           "float8_e5m2": "cuda_fp8.h"}

# KernelBench v0.2's tolerance for half precision; fp8 has no default (its error depends on the
# task's scales): such a task gives rtol itself.
HALF_RTOL = 1e-2
# The magnitude floor, as a fraction of the output's mean |ref|: elements much smaller than the
# output's typical size (cancellation, a softmax's tail) are held to rtol of that size.
DEFAULT_FLOOR = 1.0


def numpy_dtype(name: str) -> np.dtype:
    """The host dtype of a buffer of this dtype name."""
    return np.dtype(name)


def device_dtype(name: str) -> np.dtype:
    """What CuPy holds a buffer of this dtype as: itself, or an unsigned view of its width."""
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return np.dtype(f"uint{8 * np.dtype(name).itemsize}")
    return np.dtype(name)


def host_view(raw: np.ndarray, name: str) -> np.ndarray:
    """Bytes copied back from the device as `device_dtype(name)` seen as `name` again (an array of
    any other dtype, values a library computed, say, is returned as it is)."""
    if raw.dtype == device_dtype(name) and raw.dtype != numpy_dtype(name):
        return raw.view(numpy_dtype(name))
    return raw


def is_low_precision(name: str) -> bool:
    return name in LOW_PRECISION


def expected_dtype(name: str) -> np.dtype:
    """The dtype fsr keeps an output's expected values and bounds in: float32 and float64 as
    themselves, the low-precision floats as float32 (every value of theirs converts to it exactly,
    and the check does not round to the output's own precision), integers as float64."""
    if name in ("float32", "float64"):
        return np.dtype(name)
    return np.dtype(np.float32) if name in LOW_PRECISION else np.dtype(np.float64)


@dataclass(frozen=True)
class Tolerance:
    """|out - ref| <= atol + rtol * max(|ref|, floor * mean |ref|), per element."""

    atol: float
    rtol: float
    floor: float = 0.0

    def label(self) -> str:
        """'atol 1e-06, rtol 0.0001', with the magnitude floor where there is one."""
        floor = f", floor {self.floor:g} x mean |ref|" if self.floor else ""
        return f"atol {self.atol:g}, rtol {self.rtol:g}{floor}"


def default_tolerance(output_dtypes: list[str]) -> Tolerance | None:
    """The tolerance a task whose outputs have these dtypes gets when task.toml gives none: None
    where the task must give its own (float32 and integer outputs, as always; fp8, whose error
    depends on its scales; outputs of more than one low precision)."""
    kinds = set(output_dtypes)
    if kinds <= {"bfloat16", "float16"} and kinds:
        return Tolerance(0.0, HALF_RTOL, DEFAULT_FLOOR)
    return None


def tolerance_of(table: dict[str, Any], output_dtypes: list[str], number: Callable[[Any, str], float]) -> Tolerance:
    """atol, rtol and floor from a task.toml `table` (each read by `number`, which raises
    ValueError for a bad one), a missing one from the outputs' dtype's default. float32, integer
    and fp8 outputs have no default rtol (float32 and integers no default atol either: KeyError,
    as they always needed both); fp8's atol defaults to 0 and its floor to DEFAULT_FLOOR."""
    default = default_tolerance(output_dtypes)
    if default is None and any(k in LOW_PRECISION for k in output_dtypes):
        if "rtol" not in table:
            raise ValueError(f"outputs of dtype {'/'.join(dict.fromkeys(output_dtypes))} have no default "
                             "tolerance: give rtol (and atol or floor if needed)")
        default = Tolerance(0.0, 0.0, DEFAULT_FLOOR)
    if default is None:
        tol = Tolerance(number(table["atol"], "atol"), number(table["rtol"], "rtol"),
                        number(table.get("floor", 0.0), "floor"))
    else:
        tol = Tolerance(*(number(table.get(k, getattr(default, k)), k) for k in ("atol", "rtol", "floor")))
    if tol.rtol >= 1:
        raise ValueError(f"rtol {tol.rtol:g} must be below 1: an output of zeros would pass")
    return tol


def magnitude(reference: np.ndarray) -> float:
    """An output's typical size: the mean |ref| over its finite elements (0 if none)."""
    return _finite_mean(np.abs(np.asarray(reference, dtype=np.float64)))


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else 0.0


def bounds(reference: np.ndarray, tol: Tolerance) -> np.ndarray:
    """Each element's allowed deviation from the float64 `reference`, in float64: a new array,
    computed in place (one allocation, not four: at a benchmark size each is hundreds of MiB of
    pages touched for the first time, seconds of a worker's preparation on some hosts)."""
    ref = np.asarray(reference, dtype=np.float64)
    bound = np.abs(ref, out=None if ref is reference else ref)  # a copy made here is ours to change
    if tol.floor > 0:
        np.maximum(bound, tol.floor * _finite_mean(bound), out=bound)  # `magnitude`, from |ref| in hand
    bound *= tol.rtol
    bound += tol.atol
    return bound


TENSOR_RATE = {"bfloat16": 1.0, "float16": 1.0, "float8_e4m3fn": 2.0, "float8_e5m2": 2.0}  # x the 16-bit rate


def flop_ceiling(device: DeviceInfo, dtype: str = "float32") -> float:
    """The measured arithmetic ceiling of a task judged in `dtype` (its outputs'): the 16-bit
    tensor-core GEMM rate for bfloat16/float16 (twice it for fp8, the tensor cores' fp8 rate on
    the devices that have it), else the library SGEMM's; 0.0 where not measured."""
    scale = TENSOR_RATE.get(dtype)
    return scale * device.half_tflops if scale is not None else device.sgemm_tflops
