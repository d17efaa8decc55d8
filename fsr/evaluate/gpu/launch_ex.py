"""Launches through the driver's extended launch, for kernels that take tensor maps or run in
thread block clusters, by cuda-python's binding of the driver API (`cuda.bindings.driver`).

A tensor map is encoded here, on the host, with `cuTensorMapEncodeTiled`, from the header's map
checked at this size (fsr.tensormap.Resolved) and the address of the buffer this launch is given:
a launch planned over other buffers (another input set, size, decoy) gets maps of its own. The
launch is `cuLaunchKernelEx` on fsr's stream, with the header's cluster as a launch attribute;
a kernel compiled with `__cluster_dims__` carries its own (fsr.evaluate.gpu.programs refuses a
grid that its cluster does not divide, in one line, before the driver sees it).

Runs in the GPU child only (the CUDA context is CuPy's: the same process, the same device's
primary context).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from cuda.bindings import driver as drv

from fsr.tensormap import Resolved


class DriverRefused(Exception):
    """The driver refused to encode a map or to make a launch."""


@functools.cache
def _initialised() -> None:
    _call("cuInit", drv.cuInit(0))


def _call(what: str, result: tuple[Any, ...]) -> Any:
    """The value of a binding's call, or DriverRefused naming the driver's error."""
    err, *rest = result
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        raise DriverRefused(f"{what}: {name.decode() if isinstance(name, bytes) else err}")
    return rest[0] if rest else None


def encode(tmap: Resolved, address: int) -> Any:
    """The driver's CUtensorMap of `tmap` over the buffer at `address`; raises DriverRefused."""
    _initialised()
    return _call(f"tensor map {tmap.name}: cuTensorMapEncodeTiled", drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{tmap.element_type}"),
        len(tmap.dims), address,
        [drv.cuuint64_t(d) for d in tmap.dims], [drv.cuuint64_t(s) for s in tmap.strides_bytes],
        [drv.cuuint32_t(b) for b in tmap.box], [drv.cuuint32_t(e) for e in tmap.element_strides],
        getattr(drv.CUtensorMapInterleave, f"CU_TENSOR_MAP_INTERLEAVE_{tmap.interleave.upper()}"),
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{tmap.swizzle.upper()}"),
        getattr(drv.CUtensorMapL2promotion, _L2[tmap.l2_promotion]),
        getattr(drv.CUtensorMapFloatOOBfill, _OOB[tmap.oob_fill])))


_L2 = {"none": "CU_TENSOR_MAP_L2_PROMOTION_NONE", "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
       "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
_OOB = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}


class ExLaunch:
    """One launch made with cuLaunchKernelEx: its configuration and the values its parameters
    point at, built once and kept alive as long as the launch may be enqueued."""

    def __init__(self, function: int, grid: tuple[int, ...], block: tuple[int, ...], smem: int,
                 cluster: tuple[int, int, int] | None, values: list[Any]):
        """`values`: per parameter a ctypes scalar (pointer, int, float) or an encoded CUtensorMap;
        `cluster`: the header's (a launch attribute), None where none is declared there."""
        _initialised()
        full = tuple(grid) + (1,) * (3 - len(grid))
        self.function = drv.CUfunction(function)
        self.values = values
        self.pointers = (ctypes.c_void_p * max(len(values), 1))(
            *[v.getPtr() if isinstance(v, drv.CUtensorMap) else ctypes.addressof(v) for v in values])
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = full
        config.blockDimX, config.blockDimY, config.blockDimZ = tuple(block) + (1,) * (3 - len(block))
        config.sharedMemBytes = smem
        if cluster is not None:
            attribute = drv.CUlaunchAttribute()
            attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster
            config.attrs, config.numAttrs = [attribute], 1
        self.config = config

    def enqueue(self, stream: int) -> None:
        """Queue the launch on `stream`; raises DriverRefused."""
        self.config.hStream = drv.CUstream(stream)
        _call("cuLaunchKernelEx", drv.cuLaunchKernelEx(self.config, self.function, ctypes.addressof(self.pointers), 0))
